"""The SFTP door: an SSH server (asyncssh) in the API's process that serves SFTP (and scp,
over the same file operations) to Argus's own users.

Authentication reads the same projections as the API: a public key the user registered
(``projections.ssh_keys``), or, when ``v2.sftp.password_auth``, the user's API token as
the password. The login name must be the user id. Only the ``sftp`` subsystem and scp are
served: no shell, no commands, no forwarding.

Every open session is registered under its user with the credential that opened it. The
door checks them all every ``v2.sftp.recheck_s`` (one read of the projections) and at
once when told (:meth:`SftpDoor.recheck_soon`), and closes those whose key or token was
revoked or whose user was disabled; each file operation also refuses a session marked
closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

import asyncssh

from argus.service.auth import hash_token
from argus.sftp.server import ArgusSFTPServer
from projections.reads import ProjectionReads

if TYPE_CHECKING:
    from argus.config import ArgusConfig
    from argus.store import EventStore

__all__ = ["Session", "SftpDoor", "host_key_path", "load_host_key", "sftp_background"]

log = logging.getLogger("argus.sftp")
# Each SSH packet costs asyncssh a fixed share of Python work (decrypt, parse, dispatch):
# a client may send packets up to MAX_PKTSIZE (asyncssh's default 32 KiB; OpenSSH's client
# goes up to 256 KiB) and keep WINDOW bytes in flight (asyncssh's default 2 MiB).
MAX_PKTSIZE = 256 << 10
WINDOW = 16 << 20


class Session:
    """One authenticated SSH connection: whose, and by which key or token."""

    def __init__(self, door: "SftpDoor", conn: asyncssh.SSHServerConnection, user_id: str, is_admin: bool,
                 key_fingerprint: str = "", token_hash: str = "") -> None:
        self.door, self.conn, self.user_id, self.is_admin = door, conn, user_id, is_admin
        self.key_fingerprint, self.token_hash = key_fingerprint, token_hash
        self.closed = ""  # why it was cut off ("" while allowed)

    def check(self) -> None:
        if self.closed:
            raise asyncssh.SFTPPermissionDenied(self.closed)

    async def allowed(self, reads: ProjectionReads) -> str:
        """"" while the credential still lets this user in, else why not."""
        user = await reads.user(self.user_id)
        if user is None or user.disabled:
            return f"user {self.user_id} is disabled"
        if self.key_fingerprint:
            login = await reads.ssh_key_login(self.key_fingerprint)
            if login is None or login.user_id != self.user_id:
                return f"the SSH key {self.key_fingerprint} was revoked"
        elif await reads.token_holder(self.token_hash) is None:
            return "the token used as password was revoked"
        return ""


class _Auth(asyncssh.SSHServer):
    """One connection's authentication, against the projections."""

    def __init__(self, door: "SftpDoor") -> None:
        self.door = door
        self.conn: asyncssh.SSHServerConnection | None = None
        self.pending: dict[str, Any] = {}

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.door.forget(self.conn)

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return self.door.password_auth

    async def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        fingerprint = key.get_fingerprint("sha256")
        login = await self.door.reads.ssh_key_login(fingerprint)
        # Not found on a copy of a shared log: the key may have been added on another host
        # a moment ago. One look at the log settles it (as the API's AuthCache does).
        if login is None and await self.door.store.catch_up():
            login = await self.door.reads.ssh_key_login(fingerprint)
        if login is None or login.user_id != username or login.disabled:
            return False
        mine = asyncssh.import_public_key(login.public_key).export_public_key("openssh").split()[:2]
        if mine != key.export_public_key("openssh").split()[:2]:
            return False
        self.pending = {"user_id": username, "is_admin": login.is_admin, "key_fingerprint": fingerprint}
        return True

    async def validate_password(self, username: str, password: str) -> bool:
        if not self.door.password_auth or not password:
            return False
        digest = hash_token(password)
        holder = await self.door.reads.token_holder(digest)
        if holder is None and await self.door.store.catch_up():
            holder = await self.door.reads.token_holder(digest)
        if holder is None or holder.user_id != username or holder.disabled:
            return False
        self.pending = {"user_id": username, "is_admin": holder.is_admin, "token_hash": digest}
        return True

    def auth_completed(self) -> None:
        assert self.conn is not None
        self.door.register(Session(self.door, self.conn, **self.pending))


def host_key_path(config: "ArgusConfig") -> Path:
    """``v2.sftp.host_key``, else beside the event log's file."""
    if config.v2.sftp.host_key:
        return Path(config.v2.sftp.host_key)
    return Path(config.v2.sqlite.db_path).resolve().parent / "sftp_host_ed25519_key"


def load_host_key(path: Path) -> asyncssh.SSHKey:
    """The host key at ``path``, made (ed25519, 0600) when missing; one others can read is
    refused, as OpenSSH refuses it."""
    if not path.exists():
        key = asyncssh.generate_private_key("ssh-ed25519", comment="argus sftp host key")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.export_private_key())
        return key
    mode = os.stat(path, follow_symlinks=False).st_mode
    if not stat.S_ISREG(mode) or mode & 0o077:
        raise RuntimeError(f"the SFTP host key {path} must be a regular file of mode 0600 "
                           f"(it is {stat.filemode(mode)}): chmod 600 it, or delete it to make a new one")
    return asyncssh.read_private_key(path)


class SftpDoor:
    """The listening SSH server and its open sessions."""

    def __init__(self, config: "ArgusConfig", store: "EventStore") -> None:
        self.config, self.store = config, store
        self.reads = ProjectionReads(store)
        self.password_auth = config.v2.sftp.password_auth
        self.sessions: dict[asyncssh.SSHServerConnection, Session] = {}
        self.port = 0
        self.host_key_fingerprint = ""
        self._server: asyncssh.SSHAcceptor | None = None
        self._wake = asyncio.Event()

    def register(self, session: Session) -> None:
        mine = [s for s in self.sessions.values() if s.user_id == session.user_id]
        if len(mine) >= self.config.v2.sftp.max_sessions_per_user:
            session.conn.disconnect(asyncssh.DISC_TOO_MANY_CONNECTIONS,
                                    f"at most {len(mine)} SFTP connections per user; close one")
            return
        self.sessions[session.conn] = session

    def forget(self, conn: asyncssh.SSHServerConnection) -> None:
        self.sessions.pop(conn, None)

    def _sftp(self, chan: asyncssh.SSHServerChannel) -> ArgusSFTPServer:
        session = self.sessions.get(cast(asyncssh.SSHServerConnection, chan.get_connection()))
        if session is None:  # refused at registration: serve nothing
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "no session")
        return ArgusSFTPServer(chan, session)

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: any free port); returns the port."""
        key = await asyncio.to_thread(load_host_key, host_key_path(self.config))
        self.host_key_fingerprint = key.get_fingerprint("sha256")
        self._server = await asyncssh.create_server(
            lambda: _Auth(self), host, port, server_host_keys=[key], sftp_factory=self._sftp,
            allow_scp=True, agent_forwarding=False, x11_forwarding=False, allow_pty=False,
            login_timeout=60, keepalive_interval=30, window=WINDOW, max_pktsize=MAX_PKTSIZE,
            **({"encryption_algs": self.config.v2.sftp.ciphers} if self.config.v2.sftp.ciphers else {}))
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def recheck_soon(self) -> None:
        """Check the open sessions now (a key was revoked or a user disabled here)."""
        self._wake.set()

    async def recheck(self) -> int:
        """Close the sessions no longer allowed; returns how many."""
        sessions = list(self.sessions.values())
        if not sessions:
            return 0
        verdicts = [await s.allowed(self.reads) for s in sessions]
        closed = 0
        for session, why in zip(sessions, verdicts):
            if why and not session.closed:
                session.closed = why
                log.info("closing the SFTP session of %s: %s", session.user_id, why)
                session.conn.disconnect(asyncssh.DISC_NO_MORE_AUTH_METHODS_AVAILABLE, why)
                self.forget(session.conn)
                closed += 1
        return closed

    async def watch(self) -> None:
        """Recheck the sessions every ``v2.sftp.recheck_s``, or when woken, until cancelled."""
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.v2.sftp.recheck_s)
            self._wake.clear()
            try:
                await self.recheck()
            except Exception as exc:  # noqa: BLE001 - a failed look is retried at the next
                log.warning("could not check the open SFTP sessions: %s", exc)

    async def close(self) -> None:
        for session in list(self.sessions.values()):
            session.closed = "the server is stopping"
            session.conn.close()
        self.sessions.clear()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def sftp_background(config: "ArgusConfig", port: int | None = None,
                    announce: Callable[[SftpDoor], None] | None = None) -> Callable[[Any], Any]:
    """A background job for ``create_app``: the door on ``port`` (default
    ``v2.sftp.port``), as ``state.sftp``, until the app stops. ``announce`` is told once it
    listens (``argus up`` prints where)."""

    async def run(state: Any) -> None:
        door = SftpDoor(config, state.store)
        host = config.v2.sftp.host or config.v2.api.host
        try:
            await door.start(host, config.v2.sftp.port if port is None else port)
        except (OSError, RuntimeError) as exc:
            log.error("the SFTP door did not start: %s", exc)
            if announce is not None:
                announce(door)
            return
        state.sftp = door
        if announce is not None:
            announce(door)
        try:
            await door.watch()
        finally:
            state.sftp = None
            await door.close()

    return run
