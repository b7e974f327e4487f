"""The command lexer's fast path (a regex over runs of plain characters) changes nothing.

The reference is the same lexer with the fast path switched off: the character-by-character
branches below it are the lexer as it was before the fast path, so "identical behaviour" is
exactly "identical to that". Compared: every word (value, raw, line, column), or the error
(field and message, which carry the line and column). A second property checks plain
words against an oracle that knows nothing of the lexer: split on blanks.
"""

from __future__ import annotations

import re
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from argus.taskspec import TaskSpecError
from argus.taskspec import lexer as command_module
from argus.taskspec.command import split_command

BOUNDED = settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_NEVER = re.compile(r"(?!)")  # matches nothing: every character takes the slow branches

# Every character class the lexer treats specially, plain characters around them, and the
# multi-character constructs (runtime variables, continuations, substitutions).
_PIECES = [
    *"ab=/._-[],{}*?~#$\\'\" \t\n&|;<>()`!%@:+0123\x01\x7f\x85é",
    "$HOME", "${ARGUS_JOB_DIR}", "$ARGUS_USER", "${HOME", "\\\n", "$(", "$'", "python3",
    " -m ", "x.y", "key=[a,b]", "'quoted value'", '"dq $ARGUS_USER \\" x"',
]
shellish = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)


def _outcome(text: str) -> tuple[Any, ...]:
    try:
        return ("ok", [(w.value, w.raw, w.line, w.col) for w in split_command(text)])
    except TaskSpecError as exc:
        return ("error", exc.field, exc.message)


def _reference(text: str) -> tuple[Any, ...]:
    with mock.patch.object(command_module, "_PLAIN_RUN", _NEVER):
        return _outcome(text)


@BOUNDED
@given(shellish | st.text(max_size=40))
@example("python3 -m verl.trainer.main_ppo data.train_files=$HOME/datasets/a.parquet \\\n  x=[1,2]")
@example("a#b #c")
@example("/p/u[s]ers")
@example("ab\u2028cd\x85")
def test_fast_path_lexes_like_the_character_by_character_lexer(text: str) -> None:
    assert _outcome(text) == _reference(text)


_PLAIN = st.characters(blacklist_characters="\\ \t\n'\"$&|;<>()`{}*?[~#",
                       blacklist_categories=("Cs",), max_codepoint=0x2FF).filter(
    lambda c: ord(c) >= 32 and ord(c) != 127)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(_PLAIN, min_size=1, max_size=12),
                          st.sampled_from([" ", "\t", "  ", " \t "])), max_size=8))
def test_plain_words_split_on_blanks(parts: list[tuple[str, str]]) -> None:
    """Words with no special characters are the text split at spaces and tabs."""
    text = "".join(word + blank for word, blank in parts)
    expected = [(m.group(), m.group(), 1, m.start() + 1) for m in re.finditer(r"[^ \t]+", text)]
    assert _outcome(text) == ("ok", expected)
