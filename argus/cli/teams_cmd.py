"""``argus teams`` (admins change teams; a user sees their own) and ``argus usage``
(GPU-hours by GPU model, wait and goodput, by team or user and day). docs/teams.md."""

from __future__ import annotations

import csv
import datetime as dt
import json
import sys
from typing import Any

import click

from argus.cli.client import Client, client_options, fmt_time, print_table

__all__ = ["render_usage", "teams", "usage"]


def _limit(v: float | None) -> str:
    return "no limit" if v is None else f"{v:g}"


def _print_team(d: dict[str, Any]) -> None:
    click.echo(f"team {d['team_id']}" + (f" ({d['display_name']})" if d["display_name"] else "")
               + f": share {d['share']:g}, created {fmt_time(d['created_at'])} by {d['created_by']}")
    if d["quotas"]:
        print_table(["GPU model", "nominal", "borrowing limit", "lending limit", "set by"], [
            [q["gpu_model"] or "any", f"{q['nominal_gpus']:g}", _limit(q["borrowing_limit"]),
             _limit(q["lending_limit"]), q["set_by"]] for q in d["quotas"]])
    else:
        click.echo("no quota")
    if "members" in d:
        click.echo("members: " + (", ".join(m["user_id"] for m in d["members"]) or "none"))


@click.group()
def teams() -> None:
    """Teams: their share and quotas per GPU model (admins change them)."""


@teams.command("list")
@client_options
def teams_list(client: Client) -> None:
    """Every team (admin); yours otherwise."""
    d = client.request("GET", "/teams").json()
    client.out(d, lambda d: print_table(["team", "name", "share", "members", "quotas"], [
        [t["team_id"], t["display_name"], f"{t['share']:g}", t["member_count"],
         ", ".join(f"{q['gpu_model'] or 'any'} {q['nominal_gpus']:g}" for q in t["quotas"]) or "-"] for t in d])
        if d else click.echo("no team"))


@teams.command("show")
@click.argument("team_id")
@client_options
def teams_show(client: Client, team_id: str) -> None:
    """One team: its share, quotas and members (admin, or a member)."""
    client.out(client.request("GET", f"/teams/{team_id}").json(), _print_team)


@teams.command("create")
@click.argument("team_id")
@click.option("--name", "display_name", default="", help="Display name.")
@click.option("--share", type=float, default=1.0, show_default=True,
              help="Its share of the cluster, relative to the other teams'.")
@client_options
def teams_create(client: Client, team_id: str, display_name: str, share: float) -> None:
    """Create a team (admin)."""
    d = client.request("POST", "/teams", json={"team_id": team_id, "display_name": display_name, "share": share})
    client.out(d.json(), _print_team)


@teams.command("move")
@click.argument("user_id")
@click.argument("team_id")
@client_options
def teams_move(client: Client, user_id: str, team_id: str) -> None:
    """Move USER_ID into TEAM_ID, out of the team they were in (admin)."""
    d = client.request("POST", f"/teams/{team_id}/members", json={"user_id": user_id}).json()
    client.out(d, lambda d: click.echo(f"{user_id} is in team {team_id}"))


@teams.command("set-share")
@click.argument("team_id")
@click.argument("share", type=float)
@client_options
def teams_set_share(client: Client, team_id: str, share: float) -> None:
    """Set a team's share, relative to the other teams' (admin)."""
    client.out(client.request("POST", f"/teams/{team_id}/share", json={"share": share}).json(), _print_team)


@teams.command("set-quota")
@click.argument("team_id")
@click.option("--gpu-model", default="any", show_default=True, help="The GPU model (any: GPUs of any model).")
@click.option("--nominal", "nominal_gpus", type=float, default=0.0, help="GPUs guaranteed to the team.")
@click.option("--borrowing-limit", type=float, default=None, help="GPUs it may borrow beyond (default: no limit).")
@click.option("--lending-limit", type=float, default=None,
              help="Of its idle nominal GPUs, how many it lends (default: no limit).")
@client_options
def teams_set_quota(client: Client, team_id: str, gpu_model: str, nominal_gpus: float,
                    borrowing_limit: float | None, lending_limit: float | None) -> None:
    """Set a team's quota of one GPU model (admin); --nominal 0 and no limits removes it."""
    body = {"gpu_model": gpu_model, "nominal_gpus": nominal_gpus, "borrowing_limit": borrowing_limit,
            "lending_limit": lending_limit}
    client.out(client.request("POST", f"/teams/{team_id}/quotas", json=body).json(), _print_team)


def _columns(d: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    models = d["gpu_models"]
    headers = ["day", d["by"], "GPU-h", *(f"GPU-h {m}" for m in models), "tasks finished", "held GPU-h",
               "productive GPU-h", "goodput", "wait h"]
    rows = [[r["day"], r["key"], r["gpu_hours"], *(r["gpu_hours_by_model"].get(m, 0.0) for m in models),
             r["tasks_finished"], r["held_gpu_hours"], r["productive_gpu_hours"], r["goodput"], r["wait_hours"]]
            for r in d["rows"]]
    return headers, rows


def render_usage(d: dict[str, Any], fmt: str) -> None:
    """Print a usage report (``GET /usage``'s JSON) as a table, CSV or JSON."""
    if fmt == "json":
        click.echo(json.dumps(d, indent=2))
        return
    headers, rows = _columns(d)
    if fmt == "csv":
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow(headers)
        out.writerows([[("" if v is None else round(v, 4) if isinstance(v, float) else v) for v in r] for r in rows])
        return
    if not rows:
        click.echo("no usage in this window")
        return
    print_table(headers, [[("-" if v is None else f"{100 * v:.0f} %" if i == len(r) - 2 else
                            f"{v:.2f}" if isinstance(v, float) else v) for i, v in enumerate(r)] for r in rows])


def usage_options(func: Any) -> Any:
    for option in reversed([
        click.option("--by", type=click.Choice(["team", "user"]), default="user", show_default=True),
        click.option("--since", default=None, help="First day, YYYY-MM-DD (UTC); default: 30 days ago."),
        click.option("--until", default=None, help="The day after the last, YYYY-MM-DD (UTC); default: now."),
        click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
                     show_default=True),
    ]):
        func = option(func)
    return func


@click.command()
@usage_options
@client_options
def usage(client: Client, by: str, since: str | None, until: str | None, fmt: str) -> None:
    """GPU-hours by GPU model, wait and goodput by team or user and day: yours (by team:
    your team's), or everyone's for an admin."""
    params = {"by": by, **({"since": since} if since else {}), **({"until": until} if until else {})}
    render_usage(client.request("GET", "/usage", params=params).json(), "json" if client.as_json else fmt)


def day_start(text: str) -> float:
    """Midnight UTC of a YYYY-MM-DD day (for ``argus replay usage``)."""
    try:
        day = dt.date.fromisoformat(text)
    except ValueError as exc:
        raise click.BadParameter(f"{text!r} is not a date; give YYYY-MM-DD (UTC)") from exc
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp()
