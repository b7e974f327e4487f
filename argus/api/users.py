"""Users and tokens (admin; a user may list, issue and revoke their own tokens)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, delete, get, post
from litestar.exceptions import NotFoundException

from argus.api.auth import request_id, require_admin
from argus.api.openapi import errors
from argus.api.reads import Reads
from argus.api.schemas import CreateUserIn, IssueTokenIn, TokenIssuedOut, TokenOut, UserLimits, UserOut
from argus.service import Commands, Principal

__all__ = ["UsersController"]


def _self_or_admin(who: Principal, user_id: str) -> None:
    # A user asking about someone else gets 404, like for tasks: ids do not leak.
    if not who.is_admin and who.user_id != user_id:
        raise NotFoundException(f"user {user_id!r} not found")


async def _get_user(reads: Reads, who: Principal, user_id: str) -> UserOut:
    _self_or_admin(who, user_id)
    user = await reads.user(user_id)
    if user is None:
        raise NotFoundException(f"user {user_id!r} not found")
    return user


async def _set(request: Request[Any, Any, Any], commands: Commands, reads: Reads, who: Principal,
               user_id: str, disabled: bool) -> UserOut:
    require_admin(who)
    await commands.set_disabled(who, user_id, disabled, request_id(request))
    return await _get_user(reads, who, user_id)


class UsersController(Controller):
    path = "/users"
    tags = ["users"]

    @get("/")
    async def list_users(self, reads: Reads, who: Principal) -> list[UserOut]:
        """Every user (admin)."""
        require_admin(who)
        return await reads.users()

    @post("/", status_code=201, responses=errors(409))
    async def create_user(self, request: Request[Any, Any, Any], commands: Commands, reads: Reads, who: Principal,
                          data: CreateUserIn) -> UserOut:
        """Create a user (admin). Then issue them a token."""
        require_admin(who)
        await commands.create_user(who.actor, data.user_id, data.display_name,
                                         data.is_admin, request_id(request))
        return await _get_user(reads, who, data.user_id)

    @get("/{user_id:str}", responses=errors(404))
    async def get_user(self, reads: Reads, who: Principal, user_id: str) -> UserOut:
        """One user (admin, or the user themselves)."""
        return await _get_user(reads, who, user_id)

    @post("/{user_id:str}/disable", status_code=200, responses=errors(404, 409))
    async def disable(self, request: Request[Any, Any, Any], commands: Commands, reads: Reads, who: Principal,
                      user_id: str) -> UserOut:
        """Disable a user (admin): their tokens are refused from now on."""
        return await _set(request, commands, reads, who, user_id, True)

    @post("/{user_id:str}/enable", status_code=200, responses=errors(404, 409))
    async def enable(self, request: Request[Any, Any, Any], commands: Commands, reads: Reads, who: Principal,
                     user_id: str) -> UserOut:
        """Enable a disabled user again (admin)."""
        return await _set(request, commands, reads, who, user_id, False)

    @post("/{user_id:str}/limits", status_code=200, responses=errors(404))
    async def set_limits(self, request: Request[Any, Any, Any], commands: Commands, reads: Reads, who: Principal,
                         user_id: str, data: UserLimits) -> UserOut:
        """Set what a user's tasks may ask for (admin): the highest priority, whether they may
        be preemptible: false, how many may wait at once (0: no cap). Admins are not limited."""
        require_admin(who)
        await commands.set_limits(who, user_id, data, request_id(request))
        return await _get_user(reads, who, user_id)

    @get("/{user_id:str}/tokens", responses=errors(404))
    async def list_tokens(self, reads: Reads, who: Principal, user_id: str) -> list[TokenOut]:
        """A user's tokens (ids and labels; never the tokens themselves)."""
        await _get_user(reads, who, user_id)
        return await reads.tokens(user_id)

    @post("/{user_id:str}/tokens", status_code=201, responses=errors(404, 409))
    async def issue_token(self, request: Request[Any, Any, Any], commands: Commands, reads: Reads, who: Principal,
                          user_id: str, data: IssueTokenIn) -> TokenIssuedOut:
        """Issue a token; it is in this response only (stored as a hash)."""
        await _get_user(reads, who, user_id)
        token_id, token = await commands.issue_token(who.actor, user_id, data.label,
                                                           request_id=request_id(request))
        return TokenIssuedOut(user_id=user_id, token_id=token_id, token=token)

    @delete("/{user_id:str}/tokens/{token_id:str}", status_code=200, responses=errors(404, 409))
    async def revoke_token(self, request: Request[Any, Any, Any], commands: Commands, reads: Reads, who: Principal,
                           user_id: str, token_id: str) -> TokenOut:
        """Revoke a token: refused from now on."""
        await _get_user(reads, who, user_id)
        await commands.revoke_token(who, user_id, token_id, request_id(request))
        token = await reads.token(user_id, token_id)
        assert token is not None  # revoke_token raised NotFound otherwise
        return token


