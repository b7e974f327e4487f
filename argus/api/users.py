"""Users and tokens (admin; a user may list, issue and revoke their own tokens)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, delete, get, post
from litestar.datastructures import State
from litestar.exceptions import NotFoundException

from argus.api.auth import request_id, require_admin
from argus.api.schemas import CreateUserIn, IssueTokenIn, TokenIssuedOut, TokenOut, UserOut
from argus.service import Principal

__all__ = ["UsersController"]


def _self_or_admin(who: Principal, user_id: str) -> None:
    # A user asking about someone else gets 404, like for tasks: ids do not leak.
    if not who.is_admin and who.user_id != user_id:
        raise NotFoundException(f"user {user_id!r} not found")


def _user(r: tuple[Any, ...]) -> UserOut:
    return UserOut(user_id=r[0], display_name=r[1], is_admin=bool(r[2]), disabled=bool(r[3]),
                   created_at=r[4])


async def _get_user(state: State, who: Principal, user_id: str) -> UserOut:
    _self_or_admin(who, user_id)
    rows = await state.store.query(
        "SELECT user_id, display_name, is_admin, disabled, created_at FROM users "
        "WHERE user_id = ?", (user_id,))
    if not rows:
        raise NotFoundException(f"user {user_id!r} not found")
    return _user(rows[0])


async def _set(request: Request[Any, Any, Any], state: State, who: Principal,
               user_id: str, disabled: bool) -> UserOut:
    require_admin(who)
    await state.commands.set_disabled(who, user_id, disabled, request_id(request))
    return await _get_user(state, who, user_id)


class UsersController(Controller):
    path = "/users"
    tags = ["users"]

    @get("/")
    async def list_users(self, state: State, who: Principal) -> list[UserOut]:
        """Every user (admin)."""
        require_admin(who)
        rows = await state.store.query(
            "SELECT user_id, display_name, is_admin, disabled, created_at FROM users ORDER BY user_id")
        return [_user(r) for r in rows]

    @post("/", status_code=201)
    async def create_user(self, request: Request[Any, Any, Any], state: State, who: Principal,
                          data: CreateUserIn) -> UserOut:
        """Create a user (admin). Then issue them a token."""
        require_admin(who)
        await state.commands.create_user(who.actor, data.user_id, data.display_name,
                                         data.is_admin, request_id(request))
        return await _get_user(state, who, data.user_id)

    @get("/{user_id:str}")
    async def get_user(self, state: State, who: Principal, user_id: str) -> UserOut:
        """One user (admin, or the user themselves)."""
        return await _get_user(state, who, user_id)

    @post("/{user_id:str}/disable", status_code=200)
    async def disable(self, request: Request[Any, Any, Any], state: State, who: Principal,
                      user_id: str) -> UserOut:
        """Disable a user (admin): their tokens are refused from now on."""
        return await _set(request, state, who, user_id, True)

    @post("/{user_id:str}/enable", status_code=200)
    async def enable(self, request: Request[Any, Any, Any], state: State, who: Principal,
                     user_id: str) -> UserOut:
        """Enable a disabled user again (admin)."""
        return await _set(request, state, who, user_id, False)

    @get("/{user_id:str}/tokens")
    async def list_tokens(self, state: State, who: Principal, user_id: str) -> list[TokenOut]:
        """A user's tokens (ids and labels; never the tokens themselves)."""
        await _get_user(state, who, user_id)
        rows = await state.store.query(
            "SELECT token_id, label, revoked, issued_at, last_used_at FROM tokens WHERE user_id = ? "
            "ORDER BY issued_at, token_id", (user_id,))
        return [TokenOut(token_id=r[0], label=r[1], revoked=bool(r[2]), issued_at=r[3], last_used_at=r[4])
                for r in rows]

    @post("/{user_id:str}/tokens", status_code=201)
    async def issue_token(self, request: Request[Any, Any, Any], state: State, who: Principal,
                          user_id: str, data: IssueTokenIn) -> TokenIssuedOut:
        """Issue a token; it is in this response only (stored as a hash)."""
        await _get_user(state, who, user_id)
        token_id, token = await state.commands.issue_token(who.actor, user_id, data.label,
                                                           request_id=request_id(request))
        return TokenIssuedOut(user_id=user_id, token_id=token_id, token=token)

    @delete("/{user_id:str}/tokens/{token_id:str}", status_code=200)
    async def revoke_token(self, request: Request[Any, Any, Any], state: State, who: Principal,
                           user_id: str, token_id: str) -> TokenOut:
        """Revoke a token: refused from now on."""
        await _get_user(state, who, user_id)
        await state.commands.revoke_token(who, user_id, token_id, request_id(request))
        r = (await state.store.query(
            "SELECT token_id, label, revoked, issued_at, last_used_at FROM tokens WHERE token_id = ?",
            (token_id,)))[0]
        return TokenOut(token_id=r[0], label=r[1], revoked=bool(r[2]), issued_at=r[3], last_used_at=r[4])


