"""Client commands for users, tokens and data files."""

from __future__ import annotations

import os
import sys
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import quote

import click
import httpx

from argus.cli import transfer
from argus.cli.client import EXIT_CONNECT, EXIT_REFUSED, EXIT_USAGE, Client, client_options, fmt_time, print_table

__all__ = ["files", "tokens", "users"]


@click.group()
def users() -> None:
    """Users (admin)."""


@users.command("list")
@client_options
def users_list(client: Client) -> None:
    """All users."""
    d = client.request("GET", "/users").json()
    client.out(d, lambda d: print_table(
        ["user", "name", "admin", "disabled", "max priority", "may pin", "max queued", "max GPUs", "created"], [
            [u["user_id"], u["display_name"], u["is_admin"], u["disabled"],
             "any" if u["is_admin"] else u["max_priority"], u["is_admin"] or u["may_pin"],
             u["max_queued"] or "default", f'{u["max_gpus"]:g}' if u["max_gpus"] and not u["is_admin"] else "-",
             fmt_time(u["created_at"])]
            for u in d]))


@users.command("set")
@click.argument("user_id")
@click.option("--max-priority", type=int, default=None, help="The highest priority their tasks may ask for.")
@click.option("--may-pin/--no-may-pin", default=None,
              help="Whether their tasks may be preemptible: false (never stopped to make room).")
@click.option("--max-queued", type=click.IntRange(0), default=None,
              help="How many of their tasks may wait at once (0: the server's default, v2.api.default_max_queued).")
@click.option("--max-gpus", type=click.FloatRange(0), default=None,
              help="How many GPUs their running tasks may hold at once (0: no cap); a task that would "
                   "take them past it waits.")
@client_options
def users_set(client: Client, user_id: str, max_priority: int | None, may_pin: bool | None,
              max_queued: int | None, max_gpus: float | None) -> None:
    """Set what a user's tasks may ask for (admin); what is not given stays as it is."""
    now = client.request("GET", f"/users/{user_id}").json()
    body = {"max_priority": now["max_priority"] if max_priority is None else max_priority,
            "may_pin": now["may_pin"] if may_pin is None else may_pin,
            "max_queued": now["max_queued"] if max_queued is None else max_queued,
            "max_gpus": now["max_gpus"] if max_gpus is None else max_gpus}
    d = client.request("POST", f"/users/{user_id}/limits", json=body).json()
    client.out(d, lambda d: click.echo(
        f"{user_id}: priority up to {d['max_priority']}, "
        f"{'may' if d['may_pin'] else 'may not'} pin tasks (preemptible: false), "
        f"{d['max_queued'] or 'the default cap on'} task(s) waiting, "
        f"{format(d['max_gpus'], 'g') if d['max_gpus'] else 'no cap on'} GPUs held at once"))


@users.command("create")
@click.argument("user_id")
@click.option("--name", "display_name", default="", help="Display name.")
@click.option("--admin", "is_admin", is_flag=True, help="Make them an admin.")
@click.option("--issue-token/--no-issue-token", "with_token", default=True,
              help="Also issue a first token.")
@client_options
def users_create(client: Client, user_id: str, display_name: str, is_admin: bool,
                 with_token: bool) -> None:
    """Create a user (and issue their first token, shown once)."""
    d = client.request("POST", "/users", json={"user_id": user_id, "display_name": display_name,
                                                "is_admin": is_admin}).json()
    if with_token:
        d["token"] = client.request("POST", f"/users/{user_id}/tokens",
                                    json={"label": "initial"}).json()
    client.out(d, lambda d: click.echo(
        f"created {user_id}" + (f"\ntoken (shown once): {d['token']['token']}" if with_token else "")))


def _set(client: Client, user_id: str, action: str) -> None:
    d = client.request("POST", f"/users/{user_id}/{action}").json()
    client.out(d, lambda d: click.echo(f"{user_id}: {'disabled' if d['disabled'] else 'enabled'}"))


@users.command("disable")
@click.argument("user_id")
@client_options
def users_disable(client: Client, user_id: str) -> None:
    """Disable a user: refused from now on."""
    _set(client, user_id, "disable")


@users.command("enable")
@click.argument("user_id")
@client_options
def users_enable(client: Client, user_id: str) -> None:
    """Enable a disabled user."""
    _set(client, user_id, "enable")


def _me(client: Client, user: str | None) -> str:
    return user or client.request("GET", "/me").json()["user_id"]


@click.group()
def tokens() -> None:
    """API tokens (yours; an admin: anyone's with --user)."""


@tokens.command("list")
@click.option("--user", default=None)
@client_options
def tokens_list(client: Client, user: str | None) -> None:
    """Token ids and labels (never the tokens)."""
    d = client.request("GET", f"/users/{_me(client, user)}/tokens").json()
    client.out(d, lambda d: print_table(["token id", "label", "revoked", "issued", "last used (±1 h)"], [
        [t["token_id"], t["label"], t["revoked"], fmt_time(t["issued_at"]), fmt_time(t.get("last_used_at"))]
        for t in d]))


@tokens.command("issue")
@click.option("--user", default=None)
@click.option("--label", default="")
@client_options
def tokens_issue(client: Client, user: str | None, label: str) -> None:
    """Issue a token; it is printed once."""
    d = client.request("POST", f"/users/{_me(client, user)}/tokens", json={"label": label}).json()
    client.out(d, lambda d: click.echo(f"{d['token_id']}\ntoken (shown once): {d['token']}"))


@tokens.command("revoke")
@click.argument("token_id")
@click.option("--user", default=None)
@client_options
def tokens_revoke(client: Client, token_id: str, user: str | None) -> None:
    """Revoke a token."""
    d = client.request("DELETE", f"/users/{_me(client, user)}/tokens/{token_id}").json()
    client.out(d, lambda d: click.echo(f"{d['token_id']}: revoked"))


@click.group()
def files() -> None:
    """Your files: datasets/, models/, code/ (read and write); jobs/ (your tasks' outputs,
    one folder per attempt) and common/datasets, common/hf (read-only)."""


def _remote(client: Client, path: str) -> str:
    """The API path for a files PATH: refused here (exit 2) when no URL can carry it."""
    bad = next((c for c in path if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        client.fail(f"{path!r}: a file name cannot contain {bad!r} (a newline or another "
                    "control character); rename the file", EXIT_USAGE)
    return "/files/" + quote(path.lstrip("/"), safe="/")


@files.command("ls")
@click.argument("path", default="")
@client_options
def files_ls(client: Client, path: str) -> None:
    """List a folder (e.g. datasets, jobs, jobs/<submission id>, common/hf); without PATH,
    the areas and your storage against your limit."""
    d = client.request("GET", _remote(client, path)).json()
    if "areas" in d:
        client.out(d, lambda d: click.echo("\n".join(d["areas"]) + f"\nstorage: {d['summary']}"))
        return
    if d.get("truncated") and not client.as_json:
        click.echo(f"(showing the first {len(d['entries'])} entries by name)", err=True)
    marks = {"dir": "/", "link": "@"}
    client.out(d, lambda d: print_table(["name", "type", "size", "modified"], [
        [e["name"] + marks.get(e.get("type", ""), "/" if e["is_dir"] else ""),
         e.get("type") or ("dir" if e["is_dir"] else "file"), e["size"], fmt_time(e["modified"])]
        for e in d["entries"]]))


def _bar(total: int, label: str) -> Any:
    return click.progressbar(length=max(total, 1), label=label, file=sys.stderr,
                             show_eta=True, show_percent=True, width=30)


@files.command("put")
@click.argument("dest")
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("-r", "--recursive", is_flag=True, help="SOURCE is a folder: send its tree into DEST.")
@click.option("--retries", default=transfer.RETRIES, show_default=True,
              help="Times a lost connection is retried before the command stops.")
@client_options
def files_put(client: Client, dest: str, source: Path, recursive: bool, retries: int) -> None:
    """Upload SOURCE to DEST (e.g. datasets/toy/train.jsonl), resumably: run the same
    command again after an interruption and it goes on where it stopped. With -r, the
    files under the folder SOURCE go under the folder DEST (datasets/gsm8k)."""
    _remote(client, dest)
    state = transfer.StateFile()
    if source.is_dir() and not recursive:
        client.fail(f"{source} is a folder: add -r to send its tree", EXIT_USAGE)
    if not recursive:
        with _bar(source.stat().st_size, PurePosixPath(dest).name) as bar:
            size = transfer.upload_file(client, source, dest.lstrip("/"), state,
                                        transfer.Progress(bar), retries)
        client.out({"path": dest, "size": size}, lambda d: click.echo(f"{dest}: {size} bytes"))
        return
    tree = list(transfer.local_tree(source))
    total = sum(size for _, _, size in tree)
    done = 0
    with _bar(total, f"{len(tree)} files") as bar:
        for rel, path, _ in tree:
            target = f"{dest.strip('/')}/{rel}"
            _remote(client, target)
            transfer.upload_file(client, path, target, state, transfer.Progress(bar), retries)
            done += 1
    client.out({"path": dest, "files": done, "bytes": total},
               lambda d: click.echo(f"{dest}: {done} files, {total} bytes"))


@files.command("get")
@click.argument("path")
@click.argument("dest", required=False)
@click.option("-r", "--recursive", is_flag=True, help="PATH is a folder: fetch its tree into DEST.")
@click.option("--retries", default=transfer.RETRIES, show_default=True,
              help="Times a lost connection is retried before the command stops.")
@client_options
def files_get(client: Client, path: str, dest: str | None, recursive: bool, retries: int) -> None:
    """Download PATH to DEST (a file, or a folder to put it in); to stdout without DEST
    or with '-' (e.g. argus files get jobs/<submission id>/driver.log -). With -r, the
    tree under the folder PATH goes into the folder DEST (made if need be). An interrupted
    download goes on where it stopped when the same command runs again."""
    remote = _remote(client, path)
    if recursive:
        _get_tree(client, path, Path(dest or PurePosixPath(path).name), retries)
        return
    target: Path | None = None
    if dest is not None and dest != "-":
        target = Path(dest)
        if target.is_dir() or dest.endswith("/"):  # a folder: keep the file's name
            if not target.is_dir():
                client.fail(f"{dest}: no such folder", EXIT_USAGE)
            target = target / PurePosixPath(path).name
    if target is None:
        with client.download(remote) as r:
            if r.headers.get("content-type", "").startswith("application/json"):
                client.fail(f"{path} is a folder: list it with `argus files ls {path}`, or "
                            f"fetch it with `argus files get -r {path}`", EXIT_USAGE)
            out: BinaryIO = sys.stdout.buffer  # click.get_binary_stream is deprecated
            for chunk in r.iter_bytes():
                out.write(chunk)
            out.flush()
        return
    total = _remote_size(client, path, remote)
    # Written beside the target and renamed when complete: an interrupted download
    # leaves no half file under the real name, and the next run goes on from it.
    with _bar(total, PurePosixPath(path).name) as bar:
        transfer.download_file(client, path.lstrip("/"), target, transfer.StateFile(),
                               transfer.Progress(bar), retries)
    click.echo(f"{path} -> {target}", err=True)


def _remote_size(client: Client, path: str, remote: str) -> int:
    """The size of the remote file (one byte asked for); exits for a folder."""
    try:
        r = client.http.get("/api/v2" + remote, headers={"Range": "bytes=0-0"})
    except httpx.HTTPError as exc:
        client.fail(f"cannot reach the Argus server at {client.url}: {exc}", EXIT_CONNECT)
    if r.status_code != 416:
        client.check(r)
    if r.headers.get("content-type", "").startswith("application/json"):
        client.fail(f"{path} is a folder: list it with `argus files ls {path}`, or fetch it "
                    f"with `argus files get -r {path}`", EXIT_USAGE)
    return int(r.headers.get("content-range", "/0").rsplit("/", 1)[-1] or 0)


def _get_tree(client: Client, path: str, dest: Path, retries: int) -> None:
    tree = list(transfer.remote_tree(client, path.strip("/")))
    total = sum(size for _, size in tree)
    state = transfer.StateFile()
    with _bar(total, f"{len(tree)} files") as bar:
        for rel, size in tree:
            target = dest / rel
            if not target.resolve().is_relative_to(dest.resolve()):
                client.fail(f"{rel}: a name that leaves {dest}; refused", EXIT_REFUSED)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_file() and target.stat().st_size == size:
                bar.update(size)  # fetched by an earlier run
                continue
            transfer.download_file(client, f"{path.strip('/')}/{rel}", target, state,
                                   transfer.Progress(bar), retries)
    click.echo(f"{path} -> {dest}: {len(tree)} files, {total} bytes", err=True)


@files.command("mkdir")
@click.argument("path")
@client_options
def files_mkdir(client: Client, path: str) -> None:
    """Make the folder PATH (and those above it) in datasets/, models/ or code/."""
    client.request("POST", _remote(client, path), json={"op": "mkdir"})
    client.out({"path": path}, lambda d: click.echo(f"{path}/"))


@files.command("mv")
@click.argument("source")
@click.argument("dest")
@client_options
def files_mv(client: Client, source: str, dest: str) -> None:
    """Rename or move the file or folder SOURCE to DEST (within datasets/, models/,
    code/; DEST must not exist)."""
    _remote(client, dest)
    client.request("POST", _remote(client, source), json={"op": "move", "to": dest.lstrip("/")})
    client.out({"from": source, "to": dest}, lambda d: click.echo(f"{source} -> {dest}"))


@files.command("rm")
@click.argument("path")
@click.option("-r", "--recursive", is_flag=True)
@client_options
def files_rm(client: Client, path: str, recursive: bool) -> None:
    """Delete a file, or with -r a folder and everything in it."""
    params: dict[str, Any] = {"recursive": "true"} if recursive else {}
    client.request("DELETE", _remote(client, path), params=params)
