"""The shared root's layout, named once (docs/data.md, docs/security.md).

::

    <shared>/
      users/<user>/              a user's home ($HOME in a TaskSpec)
        datasets/ models/ code/  what the user uploads (files API, SFTP)
        jobs/<sid>/              one folder per attempt (and the task's folder), written by its jobs
      datasets/                  $HOME/common/datasets to users: read-only to jobs
      hf/                        $HOME/common/hf: the shared Hugging Face cache, read-only to jobs
      common/                    the legacy shared folder, read-only to jobs
      ray/                       the control plane's folder, out of every job's reach:
        confine/                 the claim registry (argus.confine.registry)
        attempts/                the drivers' reports, the stacks, the reactor's live set
        discovery/<cluster>/     the head's address file

Standard library only, and no ``typing``: the confining launcher (argus.confine.worker)
imports it before every Ray worker starts. Paths are text joined with ``posixpath``.
"""

from __future__ import annotations

import posixpath

__all__ = [
    "ATTEMPTS",
    "COMMON_AREAS",
    "CONTROL",
    "HUB_CACHE",
    "JOBS",
    "OWN_AREAS",
    "SHARED_DATASETS",
    "SHARED_READ_ONLY",
    "USERS",
    "USER_DIRS",
    "attempts_dir",
    "control_dir",
    "discovery_file",
    "home",
    "hub_cache",
    "job_dir",
    "jobs_dir",
    "registry_dir",
    "users_dir",
]

USERS = "users"  # <shared>/users/<user>: the homes
JOBS = "jobs"  # <home>/jobs/<sid>: written by the user's jobs, read-only to the files API
OWN_AREAS = ("datasets", "models", "code")  # a user's own folders, writable through the files API
USER_DIRS = (*OWN_AREAS, JOBS)  # made in every new home
SHARED_DATASETS = "datasets"  # <shared>/datasets
HUB_CACHE = "hf"  # <shared>/hf
# Folders of the shared root every user may read and no job may write (TaskSpecs name
# them as $HOME/common/...): both confinement mechanisms bind or grant exactly these.
SHARED_READ_ONLY = (SHARED_DATASETS, HUB_CACHE, "common")
# The shared folders as users name them (files API, SFTP, TaskSpecs), and where they are.
COMMON_AREAS = {"common/datasets": SHARED_DATASETS, "common/hf": HUB_CACHE}
CONTROL = "ray"  # <shared>/ray: the control plane's files
ATTEMPTS = "attempts"  # <shared>/ray/attempts


def users_dir(shared_root: str) -> str:
    """``<shared>/users``: every home; no job reaches into it but its own user's."""
    return posixpath.join(shared_root, USERS)


def home(shared_root: str, user: str) -> str:
    """``<shared>/users/<user>``."""
    return posixpath.join(shared_root, USERS, user)


def jobs_dir(shared_root: str, user: str) -> str:
    """``<shared>/users/<user>/jobs``: the attempts' (and tasks') folders."""
    return posixpath.join(shared_root, USERS, user, JOBS)


def job_dir(shared_root: str, user: str, submission_id: str) -> str:
    """``<shared>/users/<user>/jobs/<submission_id>``: one attempt's folder."""
    return posixpath.join(shared_root, USERS, user, JOBS, submission_id)


def hub_cache(shared_root: str) -> str:
    """``<shared>/hf``: the shared Hugging Face cache (``common/hf`` to users)."""
    return posixpath.join(shared_root, HUB_CACHE)


def control_dir(shared_root: str) -> str:
    """``<shared>/ray``: the control plane's folder (out of every job's reach)."""
    return posixpath.join(shared_root, CONTROL)


def registry_dir(shared_root: str) -> str:
    """``<shared>/ray/confine``: which user each Ray job runs for (argus.confine.registry)."""
    return posixpath.join(shared_root, CONTROL, "confine")


def attempts_dir(shared_root: str) -> str:
    """``<shared>/ray/attempts``: the drivers' reports, the stacks, the reactor's live set."""
    return posixpath.join(shared_root, CONTROL, ATTEMPTS)


def discovery_file(shared_root: str, cluster_name: str) -> str:
    """``<shared>/ray/discovery/<cluster>/head.json``: where a cluster's head says it is."""
    return posixpath.join(shared_root, CONTROL, "discovery", cluster_name, "head.json")
