"""The SSH public keys users registered for the SFTP door (``argus.sftp``), one entity per
fingerprint: the fold refuses a key that is in use already (by anyone), and a revocation
of a key that is not the named user's, so a fingerprint names at most one user."""

from __future__ import annotations

import sqlite3
from typing import Sequence

import msgspec

from argus.events import Recorded, SshKeyAdded, SshKeyRevoked
from argus.store.errors import InvariantViolation
from projections.base import Change, EntityFold, EntityProjection, insert_sql, upsert_sql

__all__ = [
    "SSH_KEY_FOLD", "SshKeyFold", "SshKeyLogin", "SshKeySummary", "SshKeyView", "SshKeysProjection",
    "ssh_key_login", "user_ssh_keys",
]


class SshKeyView(msgspec.Struct, frozen=True, kw_only=True):
    fingerprint: str
    key_id: str
    user_id: str
    public_key: str
    label: str
    revoked: bool
    added_at: float


class SshKeyEventError(InvariantViolation, ValueError):
    """A key event that does not fit the key's history: the store refuses the append."""


class SshKeyFold(EntityFold[SshKeyView]):
    """SshKeyAdded / SshKeyRevoked -> ``SshKeyView``, keyed by fingerprint."""

    name = "ssh_key"
    entity = SshKeyView
    handles = frozenset({"SshKeyAdded", "SshKeyRevoked"})
    home = "ssh_keys"

    def key(self, rec: Recorded) -> str:
        return rec.event.fingerprint  # type: ignore[attr-defined,no-any-return]

    def evolve(self, entity: SshKeyView | None, rec: Recorded) -> SshKeyView:
        event = rec.event
        if isinstance(event, SshKeyAdded):
            if entity is not None and not entity.revoked:
                raise SshKeyEventError(f"the key {event.fingerprint} is registered already; "
                                       "make a new key pair (ssh-keygen -t ed25519) for this user")
            return SshKeyView(fingerprint=event.fingerprint, key_id=event.key_id, user_id=event.user_id,
                              public_key=event.public_key, label=event.label, revoked=False,
                              added_at=event.added_at)
        if isinstance(event, SshKeyRevoked):
            if entity is None or entity.user_id != event.user_id or entity.key_id != event.key_id:
                raise SshKeyEventError(f"SSH key {event.key_id} of {event.user_id} not found")
            return msgspec.structs.replace(entity, revoked=True)
        raise TypeError(f"not an SSH key event: {rec.type}")

    def load(self, db: sqlite3.Connection, key: str) -> SshKeyView | None:
        row = db.execute(f"SELECT {_COLUMNS} FROM ssh_keys WHERE fingerprint = ?", (key,)).fetchone()
        return _view(row) if row else None


_COLUMNS = "fingerprint, key_id, user_id, public_key, label, revoked, added_at"


def _view(r: Sequence[object]) -> SshKeyView:
    return SshKeyView(fingerprint=r[0], key_id=r[1], user_id=r[2], public_key=r[3], label=r[4],  # type: ignore[arg-type]
                      revoked=bool(r[5]), added_at=r[6])  # type: ignore[arg-type]


def _row(k: SshKeyView) -> tuple[object, ...]:
    return (k.fingerprint, k.key_id, k.user_id, k.public_key, k.label, int(k.revoked), k.added_at)


SSH_KEY_FOLD = SshKeyFold()


class SshKeysProjection(EntityProjection[SshKeyView]):
    name = "ssh_keys"
    version = 1
    tables = ("ssh_keys",)
    fold = SSH_KEY_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[SshKeyView]]) -> None:
        db.executemany(upsert_sql("ssh_keys", _COLUMNS, "fingerprint"),
                       [_row(after) for _, _, after in changes if after is not None])

    def write_all(self, db: sqlite3.Connection, entities: dict[str, SshKeyView]) -> None:
        db.executemany(insert_sql("ssh_keys", _COLUMNS), (_row(k) for k in entities.values()))


# ---------------------------------------------------------------------------- reads


class SshKeySummary(msgspec.Struct, kw_only=True):
    """A key as its owner sees it."""

    key_id: str
    fingerprint: str
    public_key: str
    label: str
    revoked: bool
    added_at: float


class SshKeyLogin(msgspec.Struct, frozen=True, kw_only=True):
    """Who an unrevoked key lets in, as the projections say now."""

    user_id: str
    key_id: str
    public_key: str
    is_admin: bool
    disabled: bool


def user_ssh_keys(db: sqlite3.Connection, user_id: str) -> list[SshKeySummary]:
    """A user's keys, oldest first (revoked ones included)."""
    return [SshKeySummary(key_id=r[1], fingerprint=r[0], public_key=r[3], label=r[4], revoked=bool(r[5]),
                          added_at=r[6])
            for r in db.execute(f"SELECT {_COLUMNS} FROM ssh_keys WHERE user_id = ? ORDER BY added_at, key_id",
                                (user_id,))]


def ssh_key_login(db: sqlite3.Connection, fingerprint: str) -> SshKeyLogin | None:
    """The holder of the unrevoked key with this fingerprint; None when there is none."""
    row = db.execute(
        "SELECT k.user_id, k.key_id, k.public_key, u.is_admin, u.disabled FROM ssh_keys k "
        "JOIN users u ON u.user_id = k.user_id WHERE k.fingerprint = ? AND k.revoked = 0",
        (fingerprint,)).fetchone()
    if row is None:
        return None
    return SshKeyLogin(user_id=row[0], key_id=row[1], public_key=row[2], is_admin=bool(row[3]),
                       disabled=bool(row[4]))
