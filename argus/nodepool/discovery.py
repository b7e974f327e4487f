"""The head discovery record ``<shared>/ray/discovery/<cluster>/head.json`` (seed 001 §4).

Writers replace the file atomically (temp file in the same directory, fsync, rename), so a
reader on the shared filesystem sees either the old or the new record, never half of one.
Readers are defensive anyway: the file may be missing, garbage, from a different cluster or
expired, and every such case is reported as a reason to wait, never as an exception.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import msgspec

__all__ = [
    "HeadRecord",
    "ReadResult",
    "expire_head_record",
    "make_head_record",
    "read_head_record",
    "write_head_record",
]

# A record larger than this is not ours; refuse to parse it rather than read it all.
_MAX_BYTES = 64 * 1024


class HeadRecord(msgspec.Struct, kw_only=True):
    """What a worker needs to join the head. Unknown fields are ignored on read so that a
    newer publisher's record stays readable by older workers."""

    cluster_name: str
    head_ip: str
    gcs_port: int
    dashboard_port: int
    job_server_url: str
    updated_at: datetime
    expires_at: datetime
    # Argus additions: a new value per head start, so that workers reconnect after a head
    # restart on the same address (their raylets belong to the old GCS).
    head_id: str = ""
    started_at: datetime | None = None
    node_name: str = ""
    # The head's other doors to code that runs outside a job's confinement (its dashboard
    # agent's job API, the Ray client server): workers deny their jobs these (0: Ray's default).
    agent_listen_port: int = 0
    client_port: int = 0

    @property
    def gcs_address(self) -> str:
        return f"{self.head_ip}:{self.gcs_port}"

    def identity(self) -> tuple[str, int, str]:
        """What must stay the same for a running worker to stay attached."""
        return (self.head_ip, self.gcs_port, self.head_id)

    @property
    def withdrawn(self) -> bool:
        """The head itself expired the record (its Ray exited or it was stopped)."""
        return self.expires_at <= self.updated_at

    def is_fresh(self, now: datetime | None = None) -> bool:
        return (now or _utcnow()) < self.expires_at


class ReadResult(msgspec.Struct, kw_only=True, frozen=True):
    """Outcome of one read: ``record`` is set only when the file parsed; ``reason`` says
    why a worker should wait (``ok`` when the record is fresh and usable)."""

    reason: str
    record: HeadRecord | None = None
    detail: str = ""

    @property
    def usable(self) -> bool:
        return self.reason == "ok"


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def make_head_record(
    *,
    cluster_name: str,
    head_ip: str,
    gcs_port: int,
    dashboard_port: int,
    ttl_s: float,
    head_id: str | None = None,
    started_at: datetime | None = None,
    node_name: str = "",
    agent_listen_port: int = 0,
    client_port: int = 0,
    now: datetime | None = None,
) -> HeadRecord:
    """A record valid for ``ttl_s`` from ``now``."""
    now = (now or _utcnow()).replace(microsecond=0)
    return HeadRecord(
        cluster_name=cluster_name,
        head_ip=head_ip,
        gcs_port=gcs_port,
        dashboard_port=dashboard_port,
        job_server_url=f"http://{_url_host(head_ip)}:{dashboard_port}",
        updated_at=now,
        expires_at=now + timedelta(seconds=ttl_s),
        head_id=head_id or secrets.token_hex(8),
        started_at=started_at or now,
        node_name=node_name,
        agent_listen_port=agent_listen_port,
        client_port=client_port,
    )


def _url_host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def write_head_record(path: str | os.PathLike[str], record: HeadRecord) -> None:
    """Replace ``path`` atomically with ``record`` (temp file, fsync, rename, fsync dir)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = msgspec.json.encode(record) + b"\n"
    # The temp file lives in the target directory: rename is atomic only within one
    # filesystem, and a unique name keeps two publishers from clobbering each other's tmp.
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(target.parent)


def _fsync_dir(directory: Path) -> None:
    # Persist the rename itself; some filesystems (NFS, some FUSE) refuse, which is fine.
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def read_head_record(
    path: str | os.PathLike[str],
    *,
    cluster_name: str | None = None,
    now: datetime | None = None,
) -> ReadResult:
    """Read and judge the record; never raises for a bad file.

    Reasons: ``ok``, ``missing``, ``unreadable``, ``too_large``, ``garbage``,
    ``wrong_cluster``, ``expired``.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return ReadResult(reason="missing")
    except OSError as exc:
        return ReadResult(reason="unreadable", detail=f"{type(exc).__name__}: {exc}")
    if len(data) > _MAX_BYTES:
        return ReadResult(reason="too_large", detail=f"more than {_MAX_BYTES} bytes")
    try:
        record = msgspec.json.decode(data, type=HeadRecord)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return ReadResult(reason="garbage", detail=str(exc)[:200])
    if record.updated_at.tzinfo is None or record.expires_at.tzinfo is None:
        return ReadResult(reason="garbage", detail="timestamps without a time zone")
    if not record.head_ip or not 0 < record.gcs_port < 65536:
        return ReadResult(reason="garbage", record=record, detail="no usable head address")
    if cluster_name is not None and record.cluster_name != cluster_name:
        return ReadResult(
            reason="wrong_cluster", record=record, detail=f"cluster_name={record.cluster_name}"
        )
    if not record.is_fresh(now):
        return ReadResult(
            reason="expired", record=record, detail=f"expires_at={_iso(record.expires_at)}"
        )
    return ReadResult(reason="ok", record=record)


def expire_head_record(path: str | os.PathLike[str], head_id: str) -> bool:
    """Withdraw the record (``expires_at = updated_at = now``), but only if it is still the
    one ``head_id`` wrote: a replacement head may already have published its own.
    Returns whether it did."""
    result = read_head_record(path)
    record = result.record
    if record is None or record.head_id != head_id:
        return False
    now = _utcnow().replace(microsecond=0)
    write_head_record(
        path, msgspec.structs.replace(record, updated_at=now, expires_at=now)
    )
    return True


def _iso(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
