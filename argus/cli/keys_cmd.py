"""``argus keys``: the SSH public keys that open the SFTP door as you (an admin: anyone,
with --user)."""

from __future__ import annotations

from pathlib import Path

import click

from argus.cli.client import Client, client_options, fmt_time, print_table

__all__ = ["keys"]


def _me(client: Client, user: str | None) -> str:
    return user or client.request("GET", "/me").json()["user_id"]


@click.group()
def keys() -> None:
    """SSH keys for SFTP (sftp, scp, FileZilla, WinSCP)."""


@keys.command("add")
@click.argument("public_key_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--label", default="", help="A name for the key (default: its comment).")
@click.option("--user", default=None, help="Whose key (admin; default: yours).")
@client_options
def keys_add(client: Client, public_key_file: Path, label: str, user: str | None) -> None:
    """Register a public key (e.g. ~/.ssh/id_ed25519.pub; never the private key)."""
    if public_key_file.stat().st_size > 16_384:
        raise click.BadParameter("larger than a public key: give the .pub file", param_hint="PUBLIC_KEY_FILE")
    text = public_key_file.read_text(errors="replace")
    d = client.request("POST", f"/users/{_me(client, user)}/ssh-keys",
                       json={"public_key": text, "label": label}).json()
    door = client.request("GET", "/sftp").json()
    where = (f"\nconnect: sftp -P {door['port']} {_me(client, user)}@<server>"
             f"  (host key {door['host_key_fingerprint']})") if door.get("enabled") else ""
    client.out(d, lambda d: click.echo(f"{d['key_id']}  {d['fingerprint']}  added{where}"))


@keys.command("list")
@click.option("--user", default=None, help="Whose keys (admin; default: yours).")
@client_options
def keys_list(client: Client, user: str | None) -> None:
    """Your keys: id, fingerprint, label, whether revoked."""
    d = client.request("GET", f"/users/{_me(client, user)}/ssh-keys").json()
    client.out(d, lambda d: print_table(["key id", "fingerprint", "label", "revoked", "added"], [
        [k["key_id"], k["fingerprint"], k["label"], k["revoked"], fmt_time(k["added_at"])] for k in d]))


@keys.command("rm")
@click.argument("key")
@click.option("--user", default=None, help="Whose key (admin; default: yours).")
@client_options
def keys_rm(client: Client, key: str, user: str | None) -> None:
    """Revoke a key (its id, or its SHA256: fingerprint): refused at once, open SFTP
    sessions it opened closed."""
    who = _me(client, user)
    if key.startswith("SHA256:"):  # a fingerprint holds '/': find its id
        found = [k for k in client.request("GET", f"/users/{who}/ssh-keys").json() if k["fingerprint"] == key]
        if not found:
            raise click.ClickException(f"no key {key} (argus keys list shows them)")
        key = found[-1]["key_id"]
    d = client.request("DELETE", f"/users/{who}/ssh-keys/{key}").json()
    client.out(d, lambda d: click.echo(f"{d['key_id']}  {d['fingerprint']}  revoked"))
