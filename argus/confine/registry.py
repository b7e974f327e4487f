"""Which user a Ray job belongs to, as the cluster's own launcher reads it.

One file per Ray job: ``<registry>/<cluster id>/<job id hex>.json`` (``Claim``), under the
shared root's control-plane folder, which confined jobs can neither read nor write. Who
writes it, each before any user code of that job runs a worker:
- the job driver (``argus.driver``, trusted, unconfined) for the Ray jobs its own command
  starts: a Ray job that names the attempt's submission id and whose driver process is a
  descendant of this driver on this node (``watch_claims``);
- the head's watchdog for the dashboard's own job, whose workers run every job's
  entrypoint and so must stay unconfined (``SYSTEM``).
The cluster id keys it because job ids start again at 01000000 with every new head.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import msgspec

__all__ = ["Claim", "SYSTEM", "claim_path", "read_claim", "registry_dir", "write_claim"]

SYSTEM = "-system-"  # Claim.user of Ray's own jobs (the dashboard's job supervisors)


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """Ray job ``job_id`` runs for ``user`` (attempt ``submission_id``), or for Ray itself."""

    job_id: str
    user: str
    submission_id: str = ""
    driver_pid: int = 0


def registry_dir(shared_root: str) -> str:
    """Where claims live: the control plane's folder of the shared root (out of every
    job's reach: a confined job sees only its home and the shared read-only folders)."""
    return str(Path(shared_root) / "ray" / "confine")


def claim_path(registry: str, cluster_id: str, job_id: str) -> Path:
    return Path(registry) / cluster_id / f"{job_id}.json"


def write_claim(registry: str, cluster_id: str, claim: Claim) -> None:
    """Write once, atomically, readable by this Unix user only."""
    path = claim_path(registry, cluster_id, claim.job_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(msgspec.json.encode(claim))
    os.replace(tmp, path)


def read_claim(registry: str, cluster_id: str, job_id: str, wait_s: float = 0.0) -> Claim | None:
    """The claim of ``job_id``, waiting up to ``wait_s`` for it to be written (a job's
    first worker may start a moment before its driver's claim is on disk)."""
    path = claim_path(registry, cluster_id, job_id)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as f:
                claim = msgspec.json.decode(f.read(4096), type=Claim)
            return claim if claim.job_id == job_id else None
        except (FileNotFoundError, msgspec.DecodeError):
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)
        except OSError:  # a link (ELOOP: never followed) or unreadable: no claim
            return None
