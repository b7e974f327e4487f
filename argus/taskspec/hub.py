"""Models named by hub id, and the shared Hugging Face cache that resolves them.

``<shared>/hf`` (``$HOME/common/hf`` to users) is in the hub's cache layout, the one
``huggingface_hub`` writes (``hf download --cache-dir <shared>/hf``)::

    models--Qwen--Qwen2.5-0.5B-Instruct/
        refs/main                 the commit the name "main" stands for
        snapshots/<commit>/...    the model's files (links into blobs/, or plain files)
        blobs/...

Jobs get it as ``HF_HUB_CACHE`` (argus.rayjobs.submission; the hub ids a command names:
``argus.taskspec.checks.hub_ids``), so ``Qwen/Qwen2.5-0.5B-Instruct``
resolves there without a download. A hub id is in the cache when ``refs/main`` names a
commit whose ``snapshots/<commit>/`` folder is there: what the hub library needs offline.
The look never follows a link (``argus.safefs``): admins fill the folder, but it is read
on the server.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path

from argus import safefs

__all__ = ["HUB_ID_RE", "cache_folder", "in_cache"]

HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_MAX_REF = 256


def cache_folder(hub_id: str) -> str:
    """The folder of ``hub_id`` in a hub cache: ``Org/Name`` → ``models--Org--Name``."""
    return "models--" + hub_id.replace("/", "--")


def in_cache(cache: Path, hub_id: str) -> bool:
    """Whether the hub cache ``cache`` holds ``hub_id`` at ``main``, as the hub library
    looks for it offline (``refs/main``, then ``snapshots/<commit>/``)."""
    folder = cache_folder(hub_id)
    try:
        fd, st = safefs.walk(cache, [folder, "refs", "main"], _label)
    except safefs.Refused:
        return False
    try:
        if not stat.S_ISREG(st.st_mode):
            return False
        os.set_blocking(fd, True)
        commit = os.read(fd, _MAX_REF).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if not _COMMIT_RE.match(commit):
        return False
    try:
        fd, st = safefs.walk(cache, [folder, "snapshots", commit], _label)
    except safefs.Refused:
        return False
    os.close(fd)
    return stat.S_ISDIR(st.st_mode)


def _label(names: Sequence[str], i: int) -> str:
    return "common/hf/" + "/".join(names[: i + 1])
