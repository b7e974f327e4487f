"""``$HOME`` macro expansion (docs/taskspec.md, "`$HOME` expansion").

Users see their Argus home through the files API, the CLI and the WebUI's Data page:
``datasets/``, ``models/``, ``code/``, ``jobs/``, and the two shared read-only folders
mapped into it as ``common/datasets`` and ``common/hf`` (docs/data.md); the training
processes see the real filesystem. So, in this order:

1. ``$HOME/common/datasets`` → ``<shared>/datasets``
2. ``$HOME/common/hf``       → ``<shared>/hf``
3. any other ``$HOME``       → ``<shared>/users/<user>``

``${HOME}`` is the same macro. ``$HOMEX`` or ``$HOME_DIR`` are *not* the macro (bash reads
them as other variables) and are left alone; the command checks then reject them as
unknown variables. The expansion is textual, also inside quotes: the user means their
home wherever they write it.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from argus import layout

__all__ = ["expand_home", "home_dir"]

# $HOME or ${HOME}, not followed by a character that would extend the variable name.
_HOME = r"(?:\$HOME(?![A-Za-z0-9_])|\$\{HOME\})"
# A mapped folder must end there: "$HOME/common/datasets-x" is not the shared folder.
_END = r"(?=/|$|[^A-Za-z0-9_.\-])"
_COMMON_DATASETS = re.compile(_HOME + r"/common/datasets" + _END)
_COMMON_HF = re.compile(_HOME + r"/common/hf" + _END)
_ANY_HOME = re.compile(_HOME)


def home_dir(shared_root: str | PurePosixPath, user: str) -> str:
    """``<shared>/users/<user>`` as text, without a trailing slash."""
    return layout.home(str(shared_root).rstrip("/") or "/", user)


def expand_home(text: str, *, user: str, shared_root: str | PurePosixPath) -> str:
    """Expand the ``$HOME`` macros in ``text`` (see the module docstring).

    Windows line endings are normalised to ``\\n`` first: a ``\\`` before ``\\r\\n`` would
    otherwise not be a line continuation for bash.
    """
    root = str(shared_root).rstrip("/")
    text = text.replace("\r\n", "\n")
    # Lambdas, not replacement strings: a shared root or user name must never be read as
    # a regex group reference.
    text = _COMMON_DATASETS.sub(lambda _m: f"{root}/datasets", text)
    text = _COMMON_HF.sub(lambda _m: f"{root}/hf", text)
    home = home_dir(shared_root, user)
    return _ANY_HOME.sub(lambda _m: home, text)
