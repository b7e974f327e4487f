"""Users and their tokens (hashes only): what authentication reads."""

from __future__ import annotations

import sqlite3
from typing import Sequence

import msgspec

from argus.events import (
    Recorded,
    TokenIssued,
    TokenRevoked,
    TokenUsed,
    UserCreated,
    UserDisabled,
    UserEnabled,
    UserLimitsSet,
)
from argus.store.errors import InvariantViolation
from projections.base import Change, EntityFold, EntityProjection

__all__ = [
    "TokenHolder", "TokenSummary", "TokenView", "USER_FOLD", "UserFold", "UserSummary", "UserView",
    "UsersProjection", "admin_ids", "evolve_user", "gpu_caps", "list_users", "token_holder", "token_summary",
    "user_summary", "user_tokens",
]


class TokenView(msgspec.Struct, frozen=True, kw_only=True):
    token_id: str
    token_hash: str
    label: str
    revoked: bool
    issued_at: float
    last_used_at: float | None = None


class UserView(msgspec.Struct, frozen=True, kw_only=True):
    user_id: str
    display_name: str
    is_admin: bool
    disabled: bool
    created_at: float
    tokens: tuple[TokenView, ...] = ()
    max_priority: int = 0  # UserLimitsSet (admins are not limited)
    may_pin: bool = False
    max_queued: int = 0
    max_gpus: float = 0.0


class UserEventError(InvariantViolation, ValueError):
    """A user event that does not fit the user's history (unknown user, duplicate, ...):
    the store refuses the whole append."""


_replace = msgspec.structs.replace


def evolve_user(user: UserView | None, rec: Recorded) -> UserView:
    event = rec.event
    if isinstance(event, UserCreated):
        if user is not None:
            raise UserEventError(f"user {event.user_id} already exists")
        return UserView(
            user_id=event.user_id, display_name=event.display_name, is_admin=event.is_admin,
            disabled=False, created_at=event.created_at,
        )
    if user is None:
        raise UserEventError(f"{rec.type} for unknown user {rec.stream}")
    if isinstance(event, UserDisabled):
        return _replace(user, disabled=True)
    if isinstance(event, UserEnabled):
        return _replace(user, disabled=False)
    if isinstance(event, UserLimitsSet):
        return _replace(user, max_priority=event.max_priority, may_pin=event.may_pin, max_queued=event.max_queued,
                        max_gpus=event.max_gpus)
    if isinstance(event, TokenIssued):
        token = TokenView(
            token_id=event.token_id, token_hash=event.token_hash, label=event.label,
            revoked=False, issued_at=event.issued_at,
        )
        return _replace(user, tokens=(*user.tokens, token))
    if isinstance(event, TokenRevoked):
        if not any(t.token_id == event.token_id for t in user.tokens):
            raise UserEventError(f"token {event.token_id} does not belong to {user.user_id}")
        tokens = tuple(
            _replace(t, revoked=True) if t.token_id == event.token_id else t for t in user.tokens
        )
        return _replace(user, tokens=tokens)
    if isinstance(event, TokenUsed):
        tokens = tuple(
            _replace(t, last_used_at=event.at) if t.token_id == event.token_id else t for t in user.tokens
        )
        return _replace(user, tokens=tokens)
    raise TypeError(f"not a user event: {rec.type}")


def _user_row(u: UserView) -> tuple[object, ...]:
    return (u.user_id, u.display_name, int(u.is_admin), int(u.disabled), u.created_at, u.max_priority,
            int(u.may_pin), u.max_queued, u.max_gpus)


_USER_ROW = "user_id, display_name, is_admin, disabled, created_at, max_priority, may_pin, max_queued, max_gpus"


def _token_rows(u: UserView) -> list[tuple[object, ...]]:
    return [
        (t.token_id, u.user_id, t.token_hash, t.label, int(t.revoked), t.issued_at, t.last_used_at)
        for t in u.tokens
    ]


class UserFold(EntityFold[UserView]):
    """User and token events -> ``UserView``; its home is the ``users``/``tokens`` tables."""

    name = "user"
    entity = UserView
    handles = frozenset({"UserCreated", "UserDisabled", "UserEnabled", "UserLimitsSet", "TokenIssued",
                         "TokenRevoked", "TokenUsed"})
    home = "users"

    def key(self, rec: Recorded) -> str:
        return rec.event.user_id  # type: ignore[attr-defined,no-any-return]

    def evolve(self, entity: UserView | None, rec: Recorded) -> UserView:
        return evolve_user(entity, rec)

    def load(self, db: sqlite3.Connection, key: str) -> UserView | None:
        row = db.execute(f"SELECT {_USER_ROW} FROM users WHERE user_id = ?", (key,)).fetchone()
        if row is None:
            return None
        tokens = tuple(
            TokenView(token_id=t[0], token_hash=t[2], label=t[3], revoked=bool(t[4]), issued_at=t[5],
                      last_used_at=t[6])
            for t in db.execute(
                "SELECT * FROM tokens WHERE user_id = ? ORDER BY issued_at, token_id", (key,)
            )
        )
        return UserView(
            user_id=row[0], display_name=row[1], is_admin=bool(row[2]), disabled=bool(row[3]),
            created_at=row[4], tokens=tokens, max_priority=row[5], may_pin=bool(row[6]), max_queued=row[7],
            max_gpus=row[8],
        )


USER_FOLD = UserFold()


class UsersProjection(EntityProjection[UserView]):
    name = "users"
    version = 4  # v2: tokens.last_used_at; v3: users' limits; v4: their GPU cap
    tables = ("users", "tokens")
    fold = USER_FOLD

    def save(self, db: sqlite3.Connection, changes: Sequence[Change[UserView]]) -> None:
        for _, before, after in changes:
            assert after is not None
            db.execute(f"INSERT OR REPLACE INTO users ({_USER_ROW}) VALUES (?,?,?,?,?,?,?,?,?)", _user_row(after))
            if before is None or before.tokens != after.tokens:
                db.executemany("INSERT OR REPLACE INTO tokens VALUES (?,?,?,?,?,?,?)", _token_rows(after))

    def write_all(self, db: sqlite3.Connection, entities: dict[str, UserView]) -> None:
        db.executemany(f"INSERT INTO users ({_USER_ROW}) VALUES (?,?,?,?,?,?,?,?,?)",
                       (_user_row(u) for u in entities.values()))
        db.executemany(
            "INSERT INTO tokens VALUES (?,?,?,?,?,?,?)",
            (row for u in entities.values() for row in _token_rows(u)),
        )


# ---------------------------------------------------------------------------- reads


class UserSummary(msgspec.Struct, kw_only=True):
    """A user as the API shows them (never their tokens' hashes)."""

    user_id: str
    display_name: str
    is_admin: bool
    disabled: bool
    created_at: float
    max_priority: int = 0  # the highest priority their tasks may ask for (admins: any)
    may_pin: bool = False  # whether their tasks may be preemptible: false
    max_queued: int = 0  # how many of their tasks may wait at once (0: no cap)
    max_gpus: float = 0.0  # how many GPUs their admitted tasks may hold at once (0: no cap)


class TokenSummary(msgspec.Struct, kw_only=True):
    """A token as its owner sees it: ids and labels, never the token or its hash."""

    token_id: str
    label: str
    revoked: bool
    issued_at: float
    last_used_at: float | None = None  # coarse: v2.auth.token_use_resolution_s


class TokenHolder(msgspec.Struct, frozen=True, kw_only=True):
    """Who holds an unrevoked token, as the users projection says now."""

    user_id: str
    is_admin: bool
    disabled: bool
    display_name: str
    token_id: str
    last_used_at: float | None
    max_priority: int = 0
    may_pin: bool = False
    max_queued: int = 0
    max_gpus: float = 0.0


_USER_COLUMNS = _USER_ROW
_TOKEN_COLUMNS = "token_id, label, revoked, issued_at, last_used_at"


def _user(r: Sequence[object]) -> UserSummary:
    return UserSummary(user_id=r[0], display_name=r[1], is_admin=bool(r[2]), disabled=bool(r[3]),  # type: ignore[arg-type]
                       created_at=r[4], max_priority=r[5], may_pin=bool(r[6]), max_queued=r[7],  # type: ignore[arg-type]
                       max_gpus=r[8])  # type: ignore[arg-type]


def _token(r: Sequence[object]) -> TokenSummary:
    return TokenSummary(token_id=r[0], label=r[1], revoked=bool(r[2]), issued_at=r[3],  # type: ignore[arg-type]
                        last_used_at=r[4])  # type: ignore[arg-type]


def list_users(db: sqlite3.Connection) -> list[UserSummary]:
    """Every user, by id."""
    return [_user(r) for r in db.execute(f"SELECT {_USER_COLUMNS} FROM users ORDER BY user_id")]


def user_summary(db: sqlite3.Connection, user_id: str) -> UserSummary | None:
    row = db.execute(f"SELECT {_USER_COLUMNS} FROM users WHERE user_id = ?", (user_id,)).fetchone()
    return _user(row) if row else None


def user_tokens(db: sqlite3.Connection, user_id: str) -> list[TokenSummary]:
    """A user's tokens, oldest first."""
    return [_token(r) for r in db.execute(
        f"SELECT {_TOKEN_COLUMNS} FROM tokens WHERE user_id = ? ORDER BY issued_at, token_id", (user_id,))]


def token_summary(db: sqlite3.Connection, user_id: str, token_id: str) -> TokenSummary | None:
    """One of ``user_id``'s tokens (None: not theirs, or unknown)."""
    row = db.execute(f"SELECT {_TOKEN_COLUMNS} FROM tokens WHERE token_id = ? AND user_id = ?",
                     (token_id, user_id)).fetchone()
    return _token(row) if row else None


def token_holder(db: sqlite3.Connection, token_hash: str, *, revoked: bool = False) -> TokenHolder | None:
    """The holder of the token with this hash, if it is unrevoked (or, with ``revoked``,
    whatever its state: for checking that a hash is known at all)."""
    row = db.execute(
        "SELECT u.user_id, u.is_admin, u.disabled, u.display_name, t.token_id, t.last_used_at, "
        "u.max_priority, u.may_pin, u.max_queued, u.max_gpus "
        "FROM tokens t JOIN users u ON u.user_id = t.user_id WHERE t.token_hash = ?"
        + ("" if revoked else " AND t.revoked = 0"), (token_hash,)).fetchone()
    if row is None:
        return None
    return TokenHolder(user_id=row[0], is_admin=bool(row[1]), disabled=bool(row[2]), display_name=row[3],
                       token_id=row[4], last_used_at=row[5], max_priority=row[6], may_pin=bool(row[7]),
                       max_queued=row[8], max_gpus=row[9])


def gpu_caps(db: sqlite3.Connection) -> dict[str, float]:
    """The GPUs each capped user's admitted tasks may hold at once (admins are not limited)."""
    return {r[0]: float(r[1]) for r in db.execute("SELECT user_id, max_gpus FROM users WHERE max_gpus > 0 AND is_admin = 0")}


def admin_ids(db: sqlite3.Connection) -> set[str]:
    """Every admin's user id."""
    return {r[0] for r in db.execute("SELECT user_id FROM users WHERE is_admin = 1")}
