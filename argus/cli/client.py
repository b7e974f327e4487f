"""What every client command shares: where the server is, the token, HTTP, and output.

Server URL and token come from ``--url``/``--token``, else ``$ARGUS_URL``/``$ARGUS_TOKEN``,
else ``~/.config/argus/client.yaml`` (``url:``, ``token:``). Exit codes: 0 ok, 1 the
server said no (4xx/5xx), 2 usage, 3 cannot connect.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import click
import httpx
import yaml

__all__ = ["Client", "client_options", "fmt_time", "print_table", "refusal_text"]

DEFAULT_URL = "http://127.0.0.1:8080"
EXIT_REFUSED, EXIT_USAGE, EXIT_CONNECT = 1, 2, 3


def client_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "argus" / "client.yaml"


def _file_settings() -> dict[str, Any]:
    try:
        doc = yaml.safe_load(client_config_path().read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return doc if isinstance(doc, dict) else {}


class Client:
    """A thin HTTP client that turns failures into the CLI's exit codes."""

    def __init__(self, url: str | None, token: str | None, as_json: bool = False) -> None:
        settings = _file_settings()
        self.url = (url or os.environ.get("ARGUS_URL") or settings.get("url") or DEFAULT_URL).rstrip("/")
        self.token = token or os.environ.get("ARGUS_TOKEN") or settings.get("token")
        self.as_json = as_json
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=30.0)

    def fail(self, message: str, code: int) -> None:
        click.echo(f"error: {message}", err=True)
        sys.exit(code)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            r = self.http.request(method, "/api/v2" + path, **kwargs)
        except httpx.InvalidURL as exc:  # e.g. a newline in a file name: the caller's input
            self.fail(f"cannot use {path!r} in a URL: {exc}", EXIT_USAGE)
        except httpx.HTTPError as exc:
            self.fail(f"cannot reach the Argus server at {self.url}: {exc}", EXIT_CONNECT)
        self.check(r)
        return r

    @contextlib.contextmanager
    def download(self, path: str) -> Iterator[httpx.Response]:
        """GET ``path`` without reading its body: the caller iterates ``iter_bytes()``
        (a file of any size in bounded memory). A refusal or lost connection exits."""
        try:
            with self.http.stream("GET", "/api/v2" + path,
                                  timeout=httpx.Timeout(30.0, read=300.0)) as r:
                if r.status_code >= 400:
                    r.read()
                    self.check(r)
                yield r
        except httpx.InvalidURL as exc:
            self.fail(f"cannot use {path!r} in a URL: {exc}", EXIT_USAGE)
        except httpx.HTTPError as exc:
            self.fail(f"lost the connection to {self.url}: {exc}", EXIT_CONNECT)

    def check(self, r: httpx.Response) -> None:
        if r.status_code < 400:
            return
        try:
            body = r.json()
            detail, extra = body.get("detail", r.text), body.get("extra")
        except ValueError:
            detail, extra = r.text, None
        if self.as_json:
            click.echo(r.text)
        self.fail(refusal_text(r.status_code, detail, extra), EXIT_REFUSED)

    def stream(self, path: str, params: dict[str, Any] | None = None,
               headers: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
        """Server-sent events as dicts (``id``, ``event``, ``data``); comments skipped."""
        try:
            with self.http.stream("GET", "/api/v2" + path, params=params, headers=headers,
                                  timeout=httpx.Timeout(30.0, read=None)) as r:
                if r.status_code >= 400:
                    r.read()
                    self.check(r)
                event: dict[str, str] = {}
                for line in r.iter_lines():
                    if line == "":
                        if "data" in event:
                            yield event
                        event = {}
                    elif not line.startswith(":"):
                        key, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        event[key] = event[key] + "\n" + value if key == "data" and key in event else value
        except httpx.HTTPError as exc:
            self.fail(f"lost the connection to {self.url}: {exc}", EXIT_CONNECT)

    def out(self, data: Any, human: Callable[[Any], None]) -> None:
        if self.as_json:
            click.echo(json.dumps(data, indent=2))
        else:
            human(data)


def _problem_lines(extra: Any) -> list[str]:
    """``field: message`` for each problem in an error body's ``extra``: Argus's
    ``{"errors": [{field, message}]}`` or Litestar's ``[{key, message}]``."""
    items = extra.get("errors") if isinstance(extra, dict) else extra
    lines = []
    for e in items if isinstance(items, list) else []:
        if isinstance(e, dict) and e.get("message"):
            where = e.get("field") or e.get("key")
            lines.append(f"{where}: {e['message']}" if where else str(e["message"]))
    return lines


def refusal_text(status: int, detail: Any, extra: Any) -> str:
    """What the CLI prints for a 4xx/5xx: the detail, or with several problems each on
    its own line (the detail then only repeats them)."""
    lines = _problem_lines(extra)
    if len(lines) > 1:
        return f"{status}: {len(lines)} problems:" + "".join(f"\n  {line}" for line in lines)
    text = f"{status}: {detail}"
    if lines and lines[0] not in str(detail):
        text += f"\n  {lines[0]}"
    return text


def client_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--url``, ``--token``, ``--json`` and pass a ready :class:`Client` as ``client``."""

    @click.option("--url", envvar="ARGUS_URL", default=None, help="Server URL ($ARGUS_URL).")
    @click.option("--token", envvar="ARGUS_TOKEN", default=None, help="API token ($ARGUS_TOKEN).")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    @functools.wraps(func)
    def wrapper(url: str | None, token: str | None, as_json: bool, **kwargs: Any) -> Any:
        return func(client=Client(url, token, as_json), **kwargs)

    return wrapper


def fmt_time(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def fmt_starts_in(d: dict[str, Any], now: float) -> str:
    """A waiting task's start for a table row, from now: its 80 % interval, "in 20m-1h30m"
    or "in 2h05m or later" (no upper end known); until the intervals have learned (a fresh
    stack), its expected start as ``argus show`` gives it, "~in 25m" ("any moment" once
    due); "" without either."""
    earliest, latest = d.get("start_earliest"), d.get("start_latest")
    if earliest is None:
        expected = d.get("expected_start")
        if not expected:
            return ""
        return f"~in {fmt_age(expected - now)}" if expected > now else "any moment"
    low = "now" if earliest <= now else fmt_age(earliest - now)
    if latest is None:
        return f"in {low} or later"
    return f"in {low}-{fmt_age(latest - now)}" if latest > now else "now"


def fmt_eta(d: dict[str, Any]) -> str:
    """A waiting task's estimated start and its 80 % interval, as sentences say it; ""
    without an estimate."""
    if not d.get("expected_start"):
        return ""
    out = f"expected to start ~{fmt_time(d['expected_start'])}"
    if d.get("start_earliest") is not None:
        out += (f", 80 % sure between {fmt_time(d['start_earliest'])} and {fmt_time(d['start_latest'])}"
                if d.get("start_latest") is not None else
                f", 80 % sure not before {fmt_time(d['start_earliest'])} (no upper end known)")
    out += " (if nothing else arrives ahead of it)"
    if d.get("start_at_latest"):
        out += f"; at the latest {fmt_time(d['start_at_latest'])} (the tasks it waits for have time limits)"
    return out


def fmt_age(seconds: float) -> str:
    """A duration the way people say it: 45s, 12m, 3h05m, 2d4h."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str("-" if v is None else v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    click.echo("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths)).rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
