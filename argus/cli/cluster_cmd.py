"""Client commands for what is shared: ``argus queue`` (who waits, why), ``argus cluster``
(the worker nodes as the reactor last saw them), ``argus shares`` (each user's share
and recent use, as fair share weighs them) and ``argus goodput`` (the GPU time held per user
and where it went)."""

from __future__ import annotations

import time
from typing import Any

import click

from argus.cli.client import Client, client_options, fmt_age, fmt_starts_in, fmt_time, print_table
from argus.scheduler.policy import fmt_amount

__all__ = ["cluster", "drain", "goodput", "queue", "shares", "undrain"]


@click.command()
@client_options
def queue(client: Client) -> None:
    """Waiting tasks in the order they will be considered, with why each waits (other
    users' tasks appear without their ids)."""
    page = client.request("GET", "/queue", params={"limit": 1000}).json()

    def human(page: dict[str, Any]) -> None:
        rows = page["items"]
        if not rows:
            click.echo("the queue is empty")
            return
        now = time.time()
        print_table(["#", "task", "user", "prio", "needs", "waiting", "starts", "why"], [
            [e["position"], e.get("task_id") or "(another user's)", e.get("user") or "", e["priority"],
             f"{e['demand']['nnodes']}x{e['demand']['n_gpus_per_node']} GPU",
             fmt_age(now - e["waiting_since"]) if e.get("waiting_since") else "", fmt_starts_in(e, now),
             f"{e.get('wait_reason') or 'not yet considered'}: {e.get('wait_message') or ''}"[:90]]
            for e in rows])
        if page.get("next_cursor"):
            click.echo(f"({len(rows)} of {page['total']} shown)")

    client.out(page, human)


@click.command()
@client_options
def cluster(client: Client) -> None:
    """Worker nodes with their total and free GPUs and CPUs, as last observed, and what
    Argus has committed on each (admitted gangs hold their nodes until Ray gives them back)."""
    d = client.request("GET", "/cluster").json()

    def human(d: dict[str, Any]) -> None:
        if d.get("reachable") is None:
            click.echo("the cluster has not been observed yet (is the reactor running?)")
            return
        seen = fmt_time(d["observed_at"])
        click.echo(f"Ray {'reachable' if d['reachable'] else 'UNREACHABLE: ' + (d.get('error') or '')}"
                   f", last observed {seen}")
        head = d.get("head") or {}
        if head.get("job_server_url"):
            click.echo(f"head {head.get('head_ip')}:{head.get('gcs_port')}, dashboard {head['job_server_url']}")
        if not d["nodes"]:
            click.echo("no worker node has joined")
            return
        # Ray's free count lags behind admission; what Argus has promised is the ledger's.
        ledger = {n["node_id"]: n for n in d.get("ledger") or []}
        none = {"committed_gpus": 0, "committed_cpus": 0}
        models = any(n.get("gpu_type") for n in d["nodes"])  # a column only where nodes are labelled
        print_table(["node", "ip", *(["gpu model"] if models else []), "gpus free/total", "cpus free/total",
                     "committed gpus", "committed cpus"], [
            [n["node_id"][:12], n["ip"], *([n.get("gpu_type") or "-"] if models else []),
             f"{fmt_amount(n['free_gpus'])}/{fmt_amount(n['total_gpus'])}",
             f"{fmt_amount(n['free_cpus'])}/{fmt_amount(n['total_cpus'])}",
             fmt_amount(ledger.get(n["node_id"], none)["committed_gpus"]),
             fmt_amount(ledger.get(n["node_id"], none)["committed_cpus"])] for n in d["nodes"]])
        _print_holds(d.get("holds") or [])

    client.out(d, human)


def _print_holds(holds: list[dict[str, Any]]) -> None:
    """The nodes that admit no new attempt, and why (their running attempts go on)."""
    for h in holds:
        what = f"drained by {h['by']}" if h["kind"] == "drain" else "QUARANTINED"
        click.echo(f"node {h['node_id']} {what} since {fmt_time(h['since'])}: {h['reason']}")


@click.command()
@click.argument("node_id")
@click.option("--reason", required=True, help="Why (the users whose tasks wait for the node see it).")
@client_options
def drain(client: Client, node_id: str, reason: str) -> None:
    """Drain a worker node (admin): it admits no new attempt; what runs there goes on."""
    d = client.request("POST", f"/cluster/nodes/{node_id}/drain", json={"reason": reason}).json()
    client.out(d, lambda d: _print_holds(d.get("holds") or []))


@click.command()
@click.argument("node_id")
@client_options
def undrain(client: Client, node_id: str) -> None:
    """Undrain a worker node (admin): it admits again, unless it is quarantined."""
    d = client.request("POST", f"/cluster/nodes/{node_id}/undrain").json()

    def human(d: dict[str, Any]) -> None:
        click.echo(f"node {node_id} undrained")
        _print_holds(d.get("holds") or [])

    client.out(d, human)


@click.command()
@client_options
def shares(client: Client) -> None:
    """Each user's share, quota, fair share of the GPUs, GPUs held and recent GPU-hours
    (decayed by half every half-life): yours, or everyone's for an admin."""
    d = client.request("GET", "/shares").json()

    def human(d: dict[str, Any]) -> None:
        days = d["half_life_s"] / 86400
        click.echo(f"policy {d['policy']}; {fmt_amount(d['total_gpus'])} GPUs; "
                   f"usage halves every {days:g} day(s)")
        if not d["users"]:
            click.echo("no user has work or recent use")
            return
        print_table(["user", "share", "quota", "fair GPUs", "holds", "running", "waiting", "GPU-h (decayed)"], [
            [u["user"], fmt_amount(u["share"]), fmt_amount(u["quota_gpus"]) if u["quota_gpus"] else "-",
             f"{u['fair_gpus']:.1f}", fmt_amount(u["held_gpus"]), u["running_tasks"], u["waiting_tasks"],
             f"{u['usage_gpu_hours']:.1f}"] for u in d["users"]])

    client.out(d, human)


# The parts of held GPU time, as ``GET /goodput`` names them (docs/runs.md, Goodput).
_PARTS = (("placement", "placement"), ("startup", "start-up"), ("stalled", "stalled"), ("lost", "lost"),
          ("failed", "failed"), ("other", "other"))


@click.command()
@client_options
def goodput(client: Client) -> None:
    """GPU-hours held by every task so far and where they went, per user (yours; an admin:
    everyone's) and for the cluster."""
    d = client.request("GET", "/goodput").json()

    def human(d: dict[str, Any]) -> None:
        def row(name: str, r: dict[str, Any]) -> list[Any]:
            g = r["goodput"]
            ratio = f"{100 * g['ratio']:.0f} %" if g.get("ratio") is not None else "-"
            return [name, r["tasks"], f"{g['held'] / 3600:.2f}", f"{g['productive'] / 3600:.2f}", ratio,
                    *(f"{g[key] / 3600:.2f}" for key, _ in _PARTS), fmt_age(g["waiting_s"])]

        print_table(["user", "tasks", "held GPU-h", "productive", "goodput", *(n for _, n in _PARTS), "waited"],
                    [*(row(u["user"], u) for u in d["users"]), row("all users", d["cluster"])])

    client.out(d, human)
