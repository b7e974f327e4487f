"""The libyaml fast path of TaskSpec loading reads every text it takes as the pure-Python
loader does.

``_load_text`` hands a text to ``yaml.CSafeLoader`` unless ``_C_UNSAFE_RE`` finds a construct
the two loaders read differently, and falls back to ``_NoAliasLoader`` when libyaml raises.
So the fast path changes behaviour only if libyaml *accepts* a text that the pure loader
rejects or reads as another value; that is the property. (libyaml refusing a text the pure
loader takes only costs the fallback.) Values are compared by ``repr``: it tells 1 from 1.0
and True, and NaN from NaN compares equal.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from argus.taskspec.spec import _C_UNSAFE_RE, _NoAliasLoader
from argus.taskspec.document import _CSafeLoader
from tests.taskspec.support import SEED_EXAMPLE

pytestmark = pytest.mark.skipif(not getattr(yaml, "__with_libyaml__", False),
                                reason="PyYAML without libyaml: no fast path")

BOUNDED = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_REPO = Path(__file__).resolve().parents[2]


def _corpus() -> list[str]:
    """Real TaskSpecs: the shipped examples, the docs' YAML blocks, the seed's example."""
    texts = [p.read_text() for p in sorted((_REPO / "argus/examples").glob("*.yaml"))]
    docs = (_REPO / "docs/taskspec.md").read_text()
    texts += re.findall(r"```yaml\n(.*?)```", docs, re.DOTALL)
    return [*texts, SEED_EXAMPLE]


CORPUS = _corpus()

# Fragments that exercise YAML's corners: scalars that resolve to other types in 1.1,
# escapes, block scalars, flow collections, directives, merge keys, line breaks; and the
# constructs _C_UNSAFE_RE keeps from libyaml (aliases, tags, Unicode breaks, BOM), so that
# a narrower pattern fails here.
_PIECES = [
    "a", "b: 1", "- x", "  ", "\n", ": ", "'q'", '"d\\x41"', "1e-6", "0o17", "0x1F", "~", "null",
    "yes", "No", "2024-01-01", "12:30:45", "[1, 2]", "{a: 1}", "|", ">-", "#c", "&anc",
    "!!str 5", "\t", "---", "...", "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "? k", "é", "\u00a0",
    ".inf", "-.Inf", ".NaN", "+1_000", "1:20", "=", "<<: {a: 1}", "\\", "\r\n", "\r",
    '"\\N\\_\\L\\P\\e\\/"', '"\\u263A\\U0001F600"', "'it''s'", "k: 'multi\n  line'", '"a\\\n  b"',
    "\n  - x", "\n    b: 2", "[a, {b: c}]", "{a: [1, 2], }", "[a,]", "{? a}", "k" * 1100 + ": v",
    "|2\n  x", ">+\n a\n\n", "- - a", "? - a\n: b", '"\\z"', "@x", "`x", "%", "&", "a:b",
    "a :b", " - ", "x:\n- 1", "x:\n  - 1\n - 2",
    "*anc", "a: &a x\nb: *a\n", "!", "!!", "!foo x", "!!binary aGk=", "!!set {a}", "!!omap [a: 1]",
    "!!timestamp 2001-12-14t21:59:43.10-05:00", "!!float 1", "!!int '3'",
    "!<tag:yaml.org,2002:str> x", "\u2028", "\u2029", "\x85", "\ufeff",
]
fragments = st.lists(st.sampled_from(_PIECES), min_size=1, max_size=12).map("".join)

_EDITS = list(" \n:-#'\"[]{},?&|>%@`\\~0123456789abcxyz.=$/\r") + ["  ", "\n  ", ": ", "- ", "---", "..."]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A real TaskSpec with one to four insertions, deletions or copied spans."""
    text = draw(st.sampled_from(CORPUS))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "copy"]))
        if op == "insert":
            text = text[:i] + draw(st.sampled_from(_EDITS)) + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 3)):]
        else:
            j = draw(st.integers(0, len(text)))
            text = text[:i] + text[j:j + 20] + text[i:]
    return text


def _load(text: str, loader: Any) -> tuple[str, str]:
    try:
        return ("ok", repr(yaml.load(text, Loader=loader)))
    except Exception as exc:
        return ("error", type(exc).__name__)


def _check(text: str) -> None:
    if _C_UNSAFE_RE.search(text) is not None:
        return  # not taken by the fast path
    fast = _load(text, _CSafeLoader)
    if fast[0] == "ok":
        assert fast == _load(text, _NoAliasLoader), text


def test_corpus_reads_the_same() -> None:
    for text in CORPUS:
        assert _C_UNSAFE_RE.search(text) is None  # real specs do take the fast path
        assert _load(text, _CSafeLoader) == _load(text, _NoAliasLoader)


@BOUNDED
@given(fragments)
@example("a: !\n")  # a bare tag: '' in libyaml, None in PyYAML (why '!' is unsafe)
@example("a: |#\n  x\n")
@example("a: &a x\nb: *a\n")  # libyaml cannot be told to refuse aliases
@example("a:\t1")
def test_fragments_read_the_same(text: str) -> None:
    _check(text)


@BOUNDED
@given(mutated())
def test_mutated_specs_read_the_same(text: str) -> None:
    _check(text)
