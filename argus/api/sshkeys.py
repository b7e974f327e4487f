"""A user's SSH public keys, for the SFTP door (``argus.sftp``): listed, added and revoked
by the user themselves or an admin; and where the door is (``GET /sftp``)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, delete, get, post
from litestar.datastructures import State
from litestar.exceptions import NotFoundException

from argus.api.auth import request_id
from argus.api.openapi import errors
from argus.api.schemas import AddSshKeyIn, SftpOut
from argus.service import Commands, Principal
from argus.service.sshkeys import SshKeyCommands
from projections.ssh_keys import SshKeySummary

__all__ = ["SshKeysController", "sftp_door"]


async def _check(commands: Commands, who: Principal, user_id: str) -> SshKeyCommands:
    # Another user's keys are a 404, as their tokens are: ids do not leak.
    if not who.is_admin and who.user_id != user_id:
        raise NotFoundException(f"user {user_id!r} not found")
    keys = SshKeyCommands(commands)
    if await keys.reads.user(user_id) is None:
        raise NotFoundException(f"user {user_id!r} not found")
    return keys


class SshKeysController(Controller):
    path = "/users/{user_id:str}/ssh-keys"
    tags = ["users"]

    @get("/", responses=errors(404))
    async def list_keys(self, commands: Commands, who: Principal, user_id: str) -> list[SshKeySummary]:
        """The user's SSH keys (revoked ones too), oldest first."""
        return await (await _check(commands, who, user_id)).keys(user_id)

    @post("/", status_code=201, responses=errors(400, 404, 409))
    async def add_key(self, request: Request[Any, Any, Any], commands: Commands, who: Principal, user_id: str,
                      data: AddSshKeyIn) -> SshKeySummary:
        """Register a public key: it opens the SFTP door as this user from now on."""
        keys = await _check(commands, who, user_id)
        return await keys.add(who, user_id, data.public_key, data.label, request_id(request))

    @delete("/{key:str}", status_code=200, responses=errors(404, 409))
    async def revoke_key(self, request: Request[Any, Any, Any], state: State, commands: Commands, who: Principal,
                         user_id: str, key: str) -> SshKeySummary:
        """Revoke a key (by its id): refused from now on, and its open SFTP sessions closed."""
        keys = await _check(commands, who, user_id)
        revoked = await keys.revoke(who, user_id, key, request_id(request))
        if getattr(state, "sftp", None) is not None:
            state.sftp.recheck_soon()  # its open sessions are closed now, not at the next look
        return revoked


@get("/sftp", tags=["files"])
async def sftp_door(state: State, who: Principal) -> SftpOut:
    """Whether this server serves SFTP, on which port, with which host key."""
    door = getattr(state, "sftp", None)
    if door is None or not door.port:
        return SftpOut(enabled=False)
    return SftpOut(enabled=True, port=door.port, host_key_fingerprint=door.host_key_fingerprint,
                   password_auth=door.password_auth)
