"""Which user a Ray job belongs to, as the cluster's own launcher reads it.

One file per Ray job: ``<registry>/<cluster id>/<job id hex>.json`` (``Claim``), under the
shared root's control-plane folder, which confined jobs can neither read nor write. Who
writes it, each before any user code of that job runs a worker:
- the job driver (``argus.driver``, trusted, unconfined) for the Ray jobs its own command
  starts: a Ray job that names the attempt's submission id and whose driver process is a
  descendant of this driver on this node (``argus.confine.command.watch_claims``);
- the head's watchdog for the dashboard's own job, whose workers run every job's
  entrypoint and so must stay unconfined (``SYSTEM``).
The cluster id keys it because job ids start again at 01000000 with every new head.
"""

from __future__ import annotations

import os
import time

from argus import layout
from argus.confine.record import fields

__all__ = ["Claim", "SYSTEM", "claim_path", "read_claim", "registry_dir", "write_claim", "write_private"]

SYSTEM = "-system-"  # Claim.user of Ray's own jobs (the dashboard's job supervisors)


@fields
class Claim(tuple[str, str, str, int]):
    """Ray job ``job_id`` runs for ``user`` (attempt ``submission_id``), or for Ray itself.
    (A tuple with named fields, and json imported only when needed: the launcher reads a
    claim before every worker starts, see ``landlock.Rule`` and ``_plain_claim``.)"""

    __slots__ = ()
    _fields: tuple[str, ...]  # (set by ``fields``)
    job_id: str
    user: str
    submission_id: str
    driver_pid: int

    def __new__(cls, job_id: str, user: str, submission_id: str = "", driver_pid: int = 0) -> Claim:
        return super().__new__(cls, (job_id, user, submission_id, driver_pid))

    def to_json(self) -> bytes:
        import json  # here, not at the top: see _plain_claim

        return json.dumps(dict(zip(self._fields, self))).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Claim:
        """Raises ValueError unless ``data`` is a claim: the four fields, of their types."""
        plain = _plain_claim(data)
        if plain is not None:
            return plain
        import json  # here, not at the top: see _plain_claim

        fields = json.loads(data)
        if not isinstance(fields, dict) or set(fields) != set(cls._fields):
            raise ValueError("not a claim")
        claim = cls(**fields)
        if not all(isinstance(v, str) for v in claim[:3]) or type(claim.driver_pid) is not int:
            raise ValueError("not a claim")
        return claim


def _plain_json(job_id: str, user: str, submission_id: str, driver_pid: int) -> str:
    """What ``Claim.to_json`` writes (``json.dumps``) when no value needs escaping."""
    return (f'{{"job_id": "{job_id}", "user": "{user}", "submission_id": "{submission_id}", '
            f'"driver_pid": {driver_pid}}}')


def _plain_claim(data: bytes) -> Claim | None:
    """The claim in ``data`` when it is exactly what ``to_json`` writes for values with
    nothing to escape (printable ASCII: every claim of a valid user id), else None (then
    ``from_json`` asks json). Read so because json's import (about 1 ms) would be paid by
    every worker start. It is the claim json would read: with no backslash every ``"``
    opens or closes a string, and the text must equal its own re-writing."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return None
    parts = text.split('"')
    if len(parts) != 15 or "\\" in text or not text.isprintable():
        return None
    pid = parts[14].removeprefix(": ").removesuffix("}")
    if not pid.isdigit():
        return None
    claim = Claim(parts[3], parts[7], parts[11], int(pid))
    return claim if text == _plain_json(*claim) else None


def registry_dir(shared_root: str) -> str:
    """Where claims live: the control plane's folder of the shared root (out of every
    job's reach: a confined job sees only its home and the shared read-only folders)."""
    return layout.registry_dir(shared_root)


def claim_path(registry: str, cluster_id: str, job_id: str) -> str:
    return os.path.join(registry, cluster_id, f"{job_id}.json")


def write_claim(registry: str, cluster_id: str, claim: Claim) -> None:
    """Write once, atomically, readable by this Unix user only."""
    write_private(claim_path(registry, cluster_id, claim.job_id), claim.to_json())


def write_private(path: str, data: bytes) -> None:
    """Write ``path`` whole (a temporary file renamed over it), readable by this Unix user
    only, its folder made if missing (0700)."""
    folder, name = os.path.split(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_claim(registry: str, cluster_id: str, job_id: str, wait_s: float = 0.0) -> Claim | None:
    """The claim of ``job_id``, waiting up to ``wait_s`` for it to be written (a job's
    first worker may start a moment before its driver's claim is on disk)."""
    path = claim_path(registry, cluster_id, job_id)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as f:
                claim = Claim.from_json(f.read(4096))
            return claim if claim.job_id == job_id else None
        except (FileNotFoundError, ValueError):  # not yet there, or not whole
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.005)  # a worker waits on this: a stat every 5 ms costs nothing
        except OSError:  # a link (ELOOP: never followed) or unreadable: no claim
            return None
