"""Path policy: which paths a user's task may name (docs/design.md §6).

Every path is checked after ``$HOME`` expansion, with ``//``, ``.`` and ``..`` normalised
and symlinks resolved the way ``os.path.realpath`` does, at submit time on the API
server (best-effort for paths outside the shared root: a worker's ``/tmp`` may not be the
server's, but on one machine it is).

Rules:
- ``/proc``, ``/sys`` and ``/dev`` (but ``/dev/null``) are refused, as written, normalised
  or reached through a symlink (:mod:`argus.taskspec.kernelpaths`): ``/proc/self/root``
  and ``/proc/self/cwd`` reach any file, and mean something else on the worker.
- A ``..`` after a symlink is refused when the kernel would resolve the path elsewhere
  than its normalised text (``datasets/link/../x`` is ``<link target>/../x``).
- No path may reach another user's home (``<shared>/users/<other>``), or the ``users``
  directory itself, lexically or through a symlink.
- ``data.train_files`` / ``data.val_files``: under ``<shared>/users/<me>/datasets/``,
  ``<shared>/datasets/`` or the legacy ``<shared>/common/datasets/``.
- ``custom_reward_function.path``: under ``<shared>/users/<me>/code/``.
- Model paths: under ``<shared>/users/<me>/models/``, ``<shared>/hf/`` (or the legacy
  ``<shared>/common/hf/``), or a hub id.
- ``${ARGUS_JOB_DIR}`` (and the other ``ARGUS_*`` runtime variables) stand for the
  server-computed job directory inside the user's home, so they are allowed prefixes.
- Percent-encoded characters (``%2e%2e``), control characters and relative paths with
  ``..`` are rejected outright.
- With ``require_files``, a data file, model path or reward file that passes the rules but
  does not exist is noted in ``missing`` (reported after the other problems). The look is
  confined to the allowed root: each directory is opened without following symlinks, so a
  link planted since the check is never followed out of it.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import stat
from pathlib import Path

from argus import layout
from argus.taskspec.errors import Problem, TaskSpecError
from argus.taskspec.kernelpaths import LinkHops, refuse_pseudo
from argus.taskspec.expand import home_dir
from argus.taskspec.hub import cache_folder, in_cache

__all__ = ["RUNTIME_VARIABLES", "PathPolicy", "substitute_runtime_vars"]

# Exported by the driver wrapper before it runs `bash -c <command>`.
RUNTIME_VARIABLES: tuple[str, ...] = (
    "ARGUS_ATTEMPT",
    "ARGUS_JOB_DIR",
    "ARGUS_SUBMISSION_ID",
    "ARGUS_TASK_ID",
    "ARGUS_USER",
)
_RUNTIME_RE = re.compile(r"\$(?:\{(" + "|".join(RUNTIME_VARIABLES) + r")\}|("
                         + "|".join(RUNTIME_VARIABLES) + r")(?![A-Za-z0-9_]))")
_DOTDOT_RE = re.compile(r"(?:^|/)\.\.(?:/|$)")
_PERCENT_RE = re.compile(r"%[0-9A-Fa-f]{2}")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
# Separators inside one argument value: Hydra lists [a,b], quotes, key=value, PATH-style
# lists and URL schemes (file:///x splits into "file" and "///x").
_PIECE_SPLIT_RE = re.compile(r"[\s,\[\]'\"=:;{}()]+")
# How deep _realpath remembers prefixes: enough for any real layout, bounded for a
# hostile path of thousands of components.
_MEMO_DEPTH = 32


def substitute_runtime_vars(text: str, *, home: str) -> str:
    """Replace ``$ARGUS_*`` / ``${ARGUS_*}`` with stand-ins that have the same meaning for
    the path checks: the job directory is inside the user's home."""

    def repl(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name == "ARGUS_JOB_DIR":
            return f"{home}/jobs/ARGUS_SUBMISSION_ID"
        if name == "ARGUS_USER":
            return posixpath.basename(home)
        return name

    return _RUNTIME_RE.sub(repl, text)


def _normalise(path: str) -> str:
    # normpath keeps a leading "//" (POSIX allows it a special meaning); collapse first.
    return posixpath.normpath(re.sub(r"/{2,}", "/", path))


def _inside(path: str, root: str, *, strictly: bool = True) -> bool:
    root = root.rstrip("/")
    if not strictly and path == (root or "/"):
        return True
    return path.startswith(root + "/")


_DIR_FLAGS = (getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0))


def _exists_under(base: str, rel: str) -> bool:
    """Whether ``base/rel`` exists, walking ``rel`` one directory at a time from ``base``
    without following any symlink (a link as the last component counts as existing)."""
    parts = [p for p in rel.split("/") if p]
    if not parts:
        return os.path.isdir(base)
    if os.open not in os.supports_dir_fd or os.stat not in os.supports_dir_fd:
        return os.path.lexists(posixpath.join(base, *parts))  # no *at calls on this OS
    try:
        fd = os.open(base, _DIR_FLAGS)
    except OSError:
        return False
    try:
        for name in parts[:-1]:
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)  # fails on a symlink (O_NOFOLLOW)
            os.close(fd)
            fd = nxt
        os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class PathPolicy:
    """The allow-lists for one user under one shared root."""

    def __init__(self, *, shared_root: Path | str, user: str, require_files: bool = False,
                 hub_offline: bool = False) -> None:
        self.root = _normalise(str(shared_root))
        self.user = user
        # Input files that pass the rules but do not exist (checked when require_files).
        self.require_files = require_files
        self.missing: list[Problem] = []
        # A hub id not in the shared cache (with require_files): a problem when the
        # cluster cannot reach the hub (v2.hub.offline), else a warning.
        self.hub_offline = hub_offline
        self.warnings: list[str] = []
        # How the user wrote a path, by its expanded form: what messages show.
        self.written: dict[str, str] = {}
        self.home = home_dir(self.root, user)
        self.users_dir = layout.users_dir(self.root)
        # Resolved prefixes, for this policy's (one submission's) checks only: the paths
        # of one TaskSpec share their leading directories, so each is looked at once.
        self._resolved: dict[str, str] = {}
        self._hops = LinkHops()
        self._users_real = self._realpath(self.users_dir)
        self._home_real = self._realpath(self.home)
        self.data_roots = (
            f"{self.home}/datasets",
            f"{self.root}/datasets",
            f"{self.root}/common/datasets",
        )
        # <shared>/common/hf: the seed platform's (v3.0) path of the shared cache, accepted
        # as the legacy common/datasets is, for specs written then.
        self.model_roots = (f"{self.home}/models", f"{self.root}/hf", f"{self.root}/common/hf")
        self.reward_roots = (f"{self.home}/code",)

    @functools.cached_property
    def _linked_homes(self) -> dict[str, str]:
        """Other users' homes that are symlinks, by resolved target: a path that resolves
        into one of them reaches that user's files even though it is not under users/.
        Scanned only when a path resolves through a symlink out of the caller's home (the
        users directory can be large; most submissions never need it)."""
        linked: dict[str, str] = {}
        try:
            with os.scandir(self.users_dir) as entries:
                for entry in entries:
                    if entry.name != self.user and entry.is_symlink():
                        linked[os.path.realpath(entry.path)] = entry.name
        except OSError:
            pass  # no users directory yet: nothing to resolve into
        return linked

    def _realpath(self, path: str) -> str:
        """``os.path.realpath(path)``, remembering each resolved prefix of a normalised
        absolute path (up to ``_MEMO_DEPTH`` components) for this policy's later calls."""
        known = self._resolved.get(path)
        if known is not None:
            return known
        if not path.startswith("/") or path.startswith("//") or posixpath.normpath(path) != path:
            return os.path.realpath(path)  # not a form the walk below handles
        real, written = "/", ""
        for depth, name in enumerate(path.split("/")[1:] if path != "/" else ()):
            memo = depth < _MEMO_DEPTH
            if memo:
                written = f"{written}/{name}"
                hit = self._resolved.get(written)
                if hit is not None:
                    real = hit
                    continue
            candidate = f"{real}/{name}" if real != "/" else f"/{name}"
            try:
                link = stat.S_ISLNK(os.lstat(candidate).st_mode)
            except OSError:  # missing, not a directory, a loop: taken as written, as realpath does
                link = False
            # A link: the standard library resolves it (relative targets, '..', loops).
            real = os.path.realpath(candidate) if link else candidate
            if memo:
                self._resolved[written] = real
        self._resolved[path] = real
        return real

    # -- helpers ---------------------------------------------------------------------

    def _real(self, normalised: str) -> str:
        """realpath of an absolute path: where the kernel would take it on this machine."""
        return self._realpath(normalised) if normalised.startswith("/") else normalised

    def _basic_checks(self, value: str, field: str) -> str:
        if _CONTROL_RE.search(value):
            raise TaskSpecError(
                field, f"{value[:120]!r} contains a control character (NUL, newline, ...)"
            )
        encoded = _PERCENT_RE.search(value)
        if encoded:
            raise TaskSpecError(
                field,
                f"{value[:120]!r} contains percent-encoding ({encoded.group(0)}); "
                "paths are plain text, write the characters themselves",
            )
        return substitute_runtime_vars(value, home=self.home)

    def _other_home(self, path: str, users_dir: str) -> str | None:
        """The user whose home ``path`` is in (``""`` for the users dir itself), else None."""
        if path == users_dir:
            return ""
        if not _inside(path, users_dir):
            return None
        owner = path[len(users_dir.rstrip("/")) + 1:].split("/", 1)[0]
        return None if owner == self.user else owner

    def _reject_other_home(self, shown: str, field: str, owner: str, how: str) -> None:
        where = "the users directory" if owner == "" else f"another user's home ({owner})"
        raise TaskSpecError(
            field,
            f"{shown[:160]!r} {how}{where}; a task may only use its own home "
            f"{self.home}/ ($HOME/), the shared datasets and hf folders, and ${{ARGUS_JOB_DIR}}",
        )

    def check_any(self, value: str, field: str) -> None:
        """The rule for every path: no other user's home, no relative ``..``."""
        value = self._basic_checks(value, field)
        if "${" in value and _DOTDOT_RE.search(value):
            # ${oc.env:X}/../.. resolves at run time to something we cannot see here.
            raise TaskSpecError(
                field, f"{value[:160]!r} combines a Hydra interpolation with '..'; "
                "write the absolute path instead",
            )
        for piece in _PIECE_SPLIT_RE.split(value):
            if not piece or not ("/" in piece or piece.startswith("..")):
                continue
            if not piece.startswith("/"):
                if ".." in piece.split("/"):
                    raise TaskSpecError(
                        field,
                        f"{piece[:160]!r} is a relative path with '..'; write an absolute path "
                        "such as $HOME/datasets/<file>",
                    )
                continue
            self._check_absolute(piece, field)

    def _check_absolute(self, piece: str, field: str) -> str:
        path = _normalise(piece)
        refuse_pseudo(piece, path, field)
        owner = self._other_home(path, self.users_dir)
        if owner is not None:
            how = "is in " if path == piece.rstrip("/") else f"normalises to {path}, which is in "
            self._reject_other_home(piece, field, owner, how)
        real = self._real(path)
        self._hops.check(piece, path, real, field)
        if real != path and not _inside(real, self._home_real, strictly=False):
            owner = self._other_home(real, self._users_real)
            if owner is None:
                owner = next(
                    (name for target, name in self._linked_homes.items()
                     if _inside(real, target, strictly=False)),
                    None,
                )
            if owner is not None:
                self._reject_other_home(
                    piece, field, owner, f"resolves through a symlink to {real}, in "
                )
        return path

    # -- allow-lists -----------------------------------------------------------------

    def _check_allowed(self, value: str, field: str, roots: tuple[str, ...], what: str) -> str:
        given = value
        self.check_any(value, field)
        value = substitute_runtime_vars(value, home=self.home)
        self._no_interpolation(value, field, what)
        if not value.startswith("/"):
            raise TaskSpecError(field, f"{value[:160]!r} is not an absolute path; {what}")
        path = self._check_absolute(value, field)
        if not any(_inside(path, root) for root in roots):
            raise TaskSpecError(field, f"{value[:160]!r} is not allowed; {what}")
        real = self._real(path)
        if not any(_inside(real, self._realpath(root)) for root in roots):
            raise TaskSpecError(
                field, f"{value[:160]!r} resolves through a symlink to {real}; {what}"
            )
        if self.require_files:
            self._note_if_missing(given, path, real, field, roots)
        return path

    def _note_if_missing(self, given: str, path: str, real: str, field: str,
                         roots: tuple[str, ...]) -> None:
        """Note ``given`` in ``missing`` when nothing is at ``real`` (inside ``roots``)."""
        base = next((b for b in map(self._realpath, roots) if _inside(real, b)), None)
        if base is None or _exists_under(base, real[len(base.rstrip("/")) + 1:]):
            return
        shown = self.written.get(given, given)
        where = "" if shown == real else f" (looked for {real})"
        self.missing.append(
            Problem(field, f"{shown[:160]!r} does not exist{where}; {self._fix_missing(path, roots)}")
        )

    def _fix_missing(self, path: str, roots: tuple[str, ...]) -> str:
        """What to do about a missing input: upload it (own areas), or look at what the
        shared folders hold."""
        model = roots == self.model_roots
        if _inside(path, self.home):
            rel = path[len(self.home) + 1:]
            if model:
                return (f"upload the model's files to {rel}/ with `argus files put "
                        f"{rel}/<file> <local file>` (or on the WebUI's Data page), use a hub id "
                        "such as Qwen/Qwen2.5-0.5B-Instruct, or correct the path")
            return (f"upload it with `argus files put {rel} <local file>` (or on the WebUI's "
                    "Data page), or correct the path")
        for area, folder in layout.COMMON_AREAS.items():
            if _inside(path, f"{self.root}/{folder}"):
                own = ("use a hub id" if model else
                       "upload your own copy to datasets/ on the Data page and name $HOME/datasets/...")
                return (f"the WebUI's Data page shows what {area} holds (so does `argus files ls {area}`; "
                        f"an admin adds files there); correct the path, or {own}")
        return "correct the path, or ask an admin to add the file"

    @staticmethod
    def _no_interpolation(value: str, field: str, what: str) -> None:
        if "${" in value:
            raise TaskSpecError(
                field, f"{value[:160]!r} uses a Hydra interpolation, which Argus cannot check "
                f"before the run; {what}",
            )

    def _describe(self, roots: tuple[str, ...]) -> str:
        return ", ".join(f"{root}/" for root in roots)

    def check_data(self, value: str, field: str) -> str:
        """A train/val file: the user's datasets, the shared datasets (or the legacy
        ``common/datasets``)."""
        what = (
            "data files must be under $HOME/datasets/ or $HOME/common/datasets/ "
            f"(accepted: {self._describe(self.data_roots)})"
        )
        return self._check_allowed(value, field, self.data_roots, what)

    def check_reward(self, value: str, field: str) -> str:
        """A custom reward file: the user's ``code/`` only."""
        what = (
            "reward functions must be under $HOME/code/ "
            f"(accepted: {self._describe(self.reward_roots)})"
        )
        return self._check_allowed(value, field, self.reward_roots, what)

    def check_model(self, value: str, field: str) -> str:
        """A model: a hub id (``org/name``) or a path under the user's ``models/`` or the
        shared ``hf/``."""
        what = (
            "models must be a hub id like Qwen/Qwen2.5-0.5B-Instruct or a path under "
            f"$HOME/models/ or $HOME/common/hf/ (accepted: {self._describe(self.model_roots)})"
        )
        self.check_any(value, field)
        checked = substitute_runtime_vars(value, home=self.home)
        self._no_interpolation(checked, field, what)
        if not checked.startswith("/"):
            if _HUB_ID_RE.match(checked) and ".." not in checked:
                if self.require_files:
                    self._note_if_not_cached(checked, field)
                return checked
            raise TaskSpecError(
                field, f"{value[:160]!r} is neither a hub id nor an absolute path; {what}"
            )
        return self._check_allowed(value, field, self.model_roots, what)

    def _note_if_not_cached(self, hub_id: str, field: str) -> None:
        """A hub id that the shared cache (``<shared>/hf``, jobs' HF_HUB_CACHE) lacks."""
        if in_cache(Path(layout.hub_cache(self.root)), hub_id):
            return
        where = f"common/hf/{cache_folder(hub_id)}"
        if self.hub_offline:
            self.missing.append(Problem(field, (
                f"{hub_id!r} is not in the shared model cache ({where}/ with refs/main and its "
                "snapshot), and this cluster has no access to the hub (v2.hub.offline): ask an "
                "admin to add it to common/hf, or upload the model to models/ and name "
                "$HOME/models/<folder>")))
        else:
            message = (f"{field}: {hub_id!r} is not in the shared model cache ({where}/): each "
                       "attempt downloads it from the hub into your own cache "
                       "($HOME/.cache/huggingface/hub)")
            if message not in self.warnings:
                self.warnings.append(message)

    def scan_text(self, text: str, field: str) -> None:
        """Backstop over a whole command: any spelling of ``<shared>/users/<other>`` that
        survives in the text is rejected, wherever it sits in a token."""
        text = substitute_runtime_vars(text, home=self.home)
        root = re.escape(self.root.rstrip("/"))
        pattern = r"(?<![A-Za-z0-9_.\-])" + root + r"/+users/+([^/\s'\",\]\[=:;]*)"
        for match in re.finditer(pattern, text):
            owner = match.group(1)
            if owner != self.user:
                self._reject_other_home(match.group(0), field, owner, "is in ")
