"""SSH public keys for the SFTP door: checked, then recorded as SshKeyAdded / SshKeyRevoked
on the user's stream. A key is kept as its OpenSSH line without the comment, and named by
its SHA-256 fingerprint, as ``ssh-keygen -l`` prints it."""

from __future__ import annotations

import secrets
import time

import asyncssh

from argus.events import EventMeta, SshKeyAdded, SshKeyRevoked, user_stream
from argus.service.auth import Principal
from argus.service.commands import CommandError, Commands, NotFound
from argus.store import AppendBatch, InvariantViolation
from projections.ssh_keys import SshKeySummary

__all__ = ["KeyRefused", "MAX_KEY_TEXT", "ParsedKey", "SshKeyCommands", "parse_public_key"]

MAX_KEY_TEXT = 16_384  # an RSA-16384 public key line is ~2.8 KB; anything longer is not one
MIN_RSA_BITS = 2048
# What the SFTP door accepts (asyncssh serves them all); DSA is refused: OpenSSH dropped it.
ALGORITHMS = frozenset({
    "ssh-ed25519", "ssh-ed448", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
})


class ParsedKey:
    """A public key as recorded: its OpenSSH line (no comment), fingerprint, comment."""

    def __init__(self, line: str, fingerprint: str, comment: str) -> None:
        self.line, self.fingerprint, self.comment = line, fingerprint, comment


class KeyRefused(ValueError):
    """Not a public key Argus accepts; the message says what to send instead."""


def parse_public_key(text: str) -> ParsedKey:
    """The one OpenSSH public key in ``text`` (a ``~/.ssh/id_*.pub`` file's content).
    Raises :class:`KeyRefused` for a private key, several keys, or a weak or unknown kind."""
    text = text.strip()
    if not text:
        raise KeyRefused("public_key is empty: send the content of your ~/.ssh/id_ed25519.pub")
    if len(text) > MAX_KEY_TEXT:
        raise KeyRefused(f"public_key is longer than {MAX_KEY_TEXT} characters: send one public key")
    if "PRIVATE KEY" in text:
        raise KeyRefused("that is a private key: never send it; send the .pub file beside it")
    if "\n" in text:
        raise KeyRefused("send one public key (one line), not several")
    try:
        key = asyncssh.import_public_key(text)
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise KeyRefused(f"not an OpenSSH public key ({exc}); send one line such as "
                         "'ssh-ed25519 AAAA... you@host' (ssh-keygen -t ed25519 makes one)") from exc
    algorithm = key.get_algorithm()
    if algorithm not in ALGORITHMS:
        raise KeyRefused(f"{algorithm} keys are not accepted; use ed25519 (ssh-keygen -t ed25519)")
    bits = getattr(getattr(key, "pyca_key", None), "key_size", None)
    if algorithm == "ssh-rsa" and isinstance(bits, int) and bits < MIN_RSA_BITS:
        raise KeyRefused(f"an RSA key of {bits} bits is too weak: use ed25519, or RSA of at least "
                         f"{MIN_RSA_BITS} bits")
    comment = key.get_comment() or ""
    key.set_comment(None)
    line = key.export_public_key("openssh").decode("ascii").strip()
    return ParsedKey(line, key.get_fingerprint("sha256"), comment)


class SshKeyCommands:
    """Add and revoke a user's SSH keys (the user themselves, or an admin)."""

    def __init__(self, commands: Commands) -> None:
        self.commands = commands
        self.store = commands.store
        self.reads = commands.reads

    async def keys(self, user_id: str) -> list[SshKeySummary]:
        return await self.reads.ssh_keys(user_id)

    async def _append(self, who: Principal, user_id: str, event: SshKeyAdded | SshKeyRevoked,
                      request_id: str) -> None:
        batch = AppendBatch(stream=user_stream(user_id), expected_version=None, events=[event], owner=user_id)
        try:
            await self.commands.log.append_batches([batch], meta=EventMeta(actor=who.actor, request_id=request_id))
        except InvariantViolation as exc:
            raise CommandError(409, str(exc)) from exc

    async def add(self, who: Principal, user_id: str, text: str, label: str = "",
                  request_id: str = "") -> SshKeySummary:
        """Record ``text``'s key for ``user_id``; 400 for a bad key, 409 for one in use."""
        if await self.reads.user(user_id) is None:
            raise NotFound(f"user {user_id!r}")
        try:
            parsed = parse_public_key(text)
        except KeyRefused as exc:
            raise CommandError(400, str(exc)) from exc
        if len(label) > 200:
            raise CommandError(400, "label is longer than 200 characters")
        event = SshKeyAdded(user_id=user_id, key_id="sk_" + secrets.token_hex(6), fingerprint=parsed.fingerprint,
                            public_key=parsed.line, label=label or parsed.comment[:200], by=who.user_id,
                            added_at=time.time())
        await self._append(who, user_id, event, request_id)
        return next(k for k in await self.keys(user_id) if k.key_id == event.key_id)

    async def revoke(self, who: Principal, user_id: str, key: str, request_id: str = "") -> SshKeySummary:
        """Revoke ``user_id``'s key named by its id or fingerprint (idempotent)."""
        found = next((k for k in await self.keys(user_id)
                      if key in (k.key_id, k.fingerprint) and not k.revoked), None)
        found = found or next((k for k in await self.keys(user_id) if key in (k.key_id, k.fingerprint)), None)
        if found is None:
            raise NotFound(f"SSH key {key!r} of {user_id}")
        if not found.revoked:
            event = SshKeyRevoked(user_id=user_id, key_id=found.key_id, fingerprint=found.fingerprint,
                                  by=who.user_id, at=time.time())
            await self._append(who, user_id, event, request_id)
        return next(k for k in await self.keys(user_id) if k.key_id == found.key_id)
