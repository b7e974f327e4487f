"""``argus sim``: judge scheduling policies on a cluster trace, side by side."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import msgspec

if TYPE_CHECKING:
    from argus.sim import GangMix, PolicyMetrics
    from argus.sim.trace import Marks, ModelMix, Trace

__all__ = ["sim"]


@click.command()
@click.option("--trace-pods", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="openb pod list (CSV: name, cpu_milli, num_gpu, creation/deletion/scheduled time ...).")
@click.option("--trace-nodes", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="openb node list (CSV: sn, cpu_milli, gpu ...).")
@click.option("--from-db", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="An Argus database (read-only): our own tasks and run times, on the nodes last seen.")
@click.option("--policy", "policies", multiple=True, default=("all",), show_default=True,
              help="A registered policy; repeat for several side by side; 'all' for every one.")
@click.option("--backfill", is_flag=True,
              help="Turn unreserved backfill on for every policy, also those without it (fifo, priority); "
                   "fifo-backfill, reserve-backfill and fairshare backfill anyway.")
@click.option("--nodes-subset", type=click.IntRange(min=1), default=None,
              help="Simulate on this many nodes (a deterministic subset).")
@click.option("--load", type=click.FloatRange(min=0.01), default=None,
              help="Compress arrivals so the tasks offer this fraction of the cluster's GPU capacity.")
@click.option("--gang-mix", default=None, help="Turn a fraction of tasks into gangs, e.g. 0.1:2x8,0.05:4x8.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N tasks by arrival.")
@click.option("--priority-mix", default=None,
              help="Give a deterministic fraction of tasks a priority, e.g. 0.2:10 (the trace has none).")
@click.option("--preemptible", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="The fraction of tasks submitted as preemptible (deterministic by task).")
@click.option("--preemption", is_flag=True,
              help="Let priority and fairshare stop preemptible tasks (v2.scheduler.preemption).")
@click.option("--min-run", "preempt_min_run_s", type=click.FloatRange(min=0), default=15.0, show_default=True,
              help="Seconds a task runs before it may be stopped to make room (v2.scheduler.preempt_min_run_s).")
@click.option("--max-preemptions", type=click.IntRange(min=0), default=0, show_default=True,
              help="Times a task may be stopped to make room (v2.scheduler.max_preemptions; 0: no cap).")
@click.option("--move-after", "move_after_s", type=click.FloatRange(min=0), default=3600.0, show_default=True,
              help="With --preemption: a task that would wait this many seconds has preemptible tasks that fit "
                   "elsewhere moved out of its way (v2.scheduler.move_after_s; 0: never).")
@click.option("--checkpoint-every", "checkpoint_every_s", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="With --preemption: a task saves a checkpoint every this many seconds of its work, and a "
                   "stopped task runs again what it did since its last one (0: it resumes where it stopped).")
@click.option("--max-wait", type=click.FloatRange(min=0), default=12 * 3600.0, show_default=True,
              help="fairshare: a task that waited this many seconds goes first, oldest first "
                   "(v2.scheduler.fairshare.max_wait_s; 0: off).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--fgd", is_flag=True,
              help="Placement quality the FGD way: arrivals only up to 1.3x capacity; random, bestfit, argus.")
@click.option("--eta", "eta_every", type=click.IntRange(min=0), default=0, show_default=True,
              help="Give every Nth arriving task that has to wait an ETA, as users see it, and report "
                   "its error against the real start (0: off; each costs a forward run of the policy).")
@click.option("--placement", type=click.Choice(["bestfit", "fragmentation"]), default="bestfit", show_default=True,
              help="Where the policies put a gang: best-fit (Argus's), or fragmentation-aware "
                   "(argus.scheduler.fragmentation; tried, and lost on the trace).")
@click.option("--estimates", type=click.Choice(["history", "exact"]), default="history", show_default=True,
              help="Run times the policies are told: the user's history (Argus's), or the real ones "
                   "(as exact time limits would give: the ETA error left is the policy's own).")
@click.option("--placement-lag", "placement_lag_s", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Seconds from a job's start to its gang's placement (verl reserves its GPUs after "
                   "loading its models): Ray's free count lags that long, and the ledger holds the gang.")
@click.option("--gpu-spec", type=click.Choice(["obey", "ignore"]), default="obey", show_default=True,
              help="The pods' GPU models (gpu_spec) against the nodes' (model): obey them (a pod no node "
                   "could hold is skipped, as Argus refuses it at submit), or ignore them (counted as relaxed).")
@click.option("--gpu-model-mix", default=None,
              help="Give GPU models to tasks that name none, e.g. 0.33:0.1: a third of the tasks name a model in "
                   "proportion to the nodes, a tenth of those a scarce one (argus.sim.trace.ModelMix).")
@click.option("--reserve-per-model/--no-reserve-per-model", default=True, show_default=True,
              help="A reservation for the first waiting task of each set of GPU models, beside the head's "
                   "(v2.scheduler.reserve_per_model).")
@click.option("--minor-models-last/--no-minor-models-last", default=True, show_default=True,
              help="Place a task of any GPU model on the minor models' nodes last (v2.scheduler.minor_models_last).")
@click.option("--evict-after", "evict_after_s", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="With --preemption: a waiting task stops or moves no one before it waited this many seconds "
                   "(v2.scheduler.evict_after_s).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def sim(trace_pods: Path | None, trace_nodes: Path | None, from_db: Path | None, policies: tuple[str, ...],
        nodes_subset: int | None, load: float | None, gang_mix: str | None, limit: int | None,
        priority_mix: str | None, preemptible: float, seed: int, fgd: bool, gpu_spec: str, as_json: bool,
        max_wait: float, gpu_model_mix: str | None, **settings: Any) -> None:
    """Run a trace through the scheduler's own policies on a virtual clock and compare
    waits, utilisation and fairness (docs/scheduling.md)."""
    from argus.config import FairShareConfig
    from argus.sim import SimSettings, load_openb, measure, simulate

    # The options named as SimSettings' fields are its fields; --max-wait is fairshare's.
    run = SimSettings(fairshare=FairShareConfig(max_wait_s=max_wait), **settings)
    chosen = _policies(policies)
    mix, marks = _mixes(gang_mix, priority_mix, preemptible)
    models = _model_mix(gpu_model_mix)
    if from_db is not None:
        if trace_pods or trace_nodes:
            raise click.UsageError("give either --from-db or --trace-pods/--trace-nodes, not both")
        trace = _history(from_db)
    elif trace_pods is None or trace_nodes is None:
        raise click.UsageError("give --trace-pods and --trace-nodes (an openb trace), or --from-db")
    else:
        trace = load_openb(trace_pods, trace_nodes, nodes_subset=nodes_subset, load=load, gang_mix=mix,
                           marks=marks, seed=seed, limit=limit, gpu_spec=gpu_spec, model_mix=models)
    if fgd:
        _fgd(trace, seed, as_json)
        return
    results = [measure(simulate(trace, p, run, progress=_Progress(p, i, len(chosen))))
               for i, p in enumerate(chosen, start=1)]
    skipped = {"no_gpu": trace.skipped_no_gpu, "no_runtime": trace.skipped_no_runtime,
               "never_fits_the_cluster": trace.skipped_too_big,
               # of those, the ones that fit by size on nodes of another GPU model
               "no_node_of_its_gpu_model": trace.skipped_no_model}
    relaxed = {"gpu_model_set_aside": trace.relaxed_model} if trace.relaxed_model else {}
    if as_json:
        click.echo(msgspec.json.encode({"tasks": len(trace.tasks), "nodes": len(trace.nodes),
                                        "gpus": sum(n.gpus for n in trace.nodes), "skipped": skipped,
                                        "relaxed": relaxed,
                                        # --backfill: forced on every policy (those named
                                        # *backfill and fairshare backfill in any case)
                                        "backfill_forced": run.backfill, "policies": results}))
        return
    click.echo(f"{len(trace.tasks)} tasks on {len(trace.nodes)} nodes ({sum(n.gpus for n in trace.nodes):g} GPUs); "
               f"skipped: {', '.join(f'{k} {v}' for k, v in skipped.items())}"
               + (f"; relaxed: gpu_model_set_aside {trace.relaxed_model}" if relaxed else "")
               + ("; backfill forced on every policy" if run.backfill else ""))
    _table(results)
    _notes(results, run.eta_every)


def _policies(policies: tuple[str, ...]) -> list[str]:
    """The policies asked for, in order, each once (``all``: every registered one)."""
    from argus.scheduler import POLICIES

    chosen = sorted(POLICIES) if "all" in policies else list(dict.fromkeys(policies))
    unknown = [p for p in chosen if p not in POLICIES]
    if unknown:
        raise click.BadParameter(f"unknown policy {unknown[0]!r}; one of {', '.join(sorted(POLICIES))} or all",
                                 param_hint="--policy")
    return chosen


def _mixes(gang_mix: str | None, priority_mix: str | None, preemptible: float) -> tuple[GangMix | None, Marks]:
    """The gangs and the priority and preemptible marks to put on an openb trace's tasks."""
    from argus.sim import GangMix
    from argus.sim.trace import Marks

    try:
        mix = GangMix.parse(gang_mix) if gang_mix else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--gang-mix") from exc
    try:
        return mix, Marks.parse(priority_mix, preemptible)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--priority-mix") from exc


def _model_mix(gpu_model_mix: str | None) -> "ModelMix | None":
    from argus.sim.trace import ModelMix

    try:
        return ModelMix.parse(gpu_model_mix) if gpu_model_mix else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--gpu-model-mix") from exc


def _history(from_db: Path) -> Trace:
    """Our own tasks and run times, on the nodes last seen."""
    from argus.sim.history import load_history

    trace = load_history(from_db)
    if not trace.nodes:
        raise click.UsageError(f"{from_db} has never observed a worker node: nothing to simulate on")
    return trace


def _table(results: list[PolicyMetrics]) -> None:
    """One row per policy."""
    rows = [("policy", "util", "util busy", "arriving", "wait p50", "p90", "p99", "max", "big p99", "slowdown", "Jain",
             "Jain sd", "Jain user", "worst user", "never", "preempted", "lost")]
    for m in results:
        rows.append((m.policy, f"{m.gpu_utilization:.3f}", f"{m.contended_utilization:.3f}",
                     f"{m.contended_utilization_arriving:.3f}",
                     _dur(m.wait_p50_s), _dur(m.wait_p90_s),
                     _dur(m.wait_p99_s), _dur(m.wait_max_s), _dur(m.big_gang_wait_p99_s),
                     f"{m.bounded_slowdown_avg:.1f}", f"{m.jain_fairness:.3f}", f"{m.jain_slowdown:.3f}",
                     f"{m.jain_user_slowdown:.3f}", f"{m.worst_user_slowdown:.2f}x/{_dur(m.worst_user_mean_wait_s)}",
                     str(m.never_admitted),
                     str(m.preemptions), _lost(m.lost_gpu_hours, m.used_gpu_hours)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(r, widths)))


def _notes(results: list[PolicyMetrics], eta_every: int) -> None:
    """What the table does not say: no contention, the big gangs, the ETAs' errors."""
    if results and all(m.wait_max_s == 0 for m in results):
        click.echo("warning: no task waited under any policy: this workload never contends for the cluster, "
                   "so the policies cannot differ; raise --load or take fewer nodes (--nodes-subset)", err=True)
    if results:
        m = results[0]  # the same workload under every policy
        click.echo(f"big: the {m.big_gang_tasks} tasks of the largest gangs, "
                   + (f"{', '.join(str(g) for g in m.big_gang_gpus)} GPUs" if m.big_gang_gpus else "none")
                   + " (largest first, up to 10% of the tasks; never the most common size)")
    for m in results:
        if m.at_latest_given:
            click.echo(f"ETA at the latest ({m.policy}): {m.at_latest_given} bounds given (reservations waiting "
                       f"only for time limits), {m.at_latest_broken} broken")
        if eta_every:
            _eta_notes(m)


def _eta_notes(m: PolicyMetrics) -> None:
    """How far the ETAs given were from the real starts."""
    from argus.scheduler.eta import DEFAULT_HORIZON

    err = (f"median {_dur(m.eta_abs_error_p50_s)}, p90 {_dur(m.eta_abs_error_p90_s)}"
           if m.eta_abs_error_p50_s is not None and m.eta_abs_error_p90_s is not None else "-")
    if m.eta_rel_error_p50 is not None:
        err += f" (median {m.eta_rel_error_p50:.0%} of the actual wait)"
    if m.eta_coarse_rel_error_p50 is not None:
        err += (f"; of them {m.eta_coarse_samples} past the first {DEFAULT_HORIZON} in line "
                f"(the coarse estimate): median {m.eta_coarse_rel_error_p50:.0%} of the wait")
    click.echo(f"ETA error ({m.policy}): {err} over {m.eta_samples} waiting tasks; "
               f"{m.eta_unknown} got no estimate")
    if m.eta_range_coverage is not None:
        width = (f"median width {_dur(m.eta_range_width_p50_s)} ({m.eta_range_width_rel_p50:.0%} of the wait)"
                 if m.eta_range_width_p50_s is not None and m.eta_range_width_rel_p50 is not None else "")
        click.echo(f"ETA interval ({m.policy}, 80 %): the start fell inside for {m.eta_range_coverage:.0%} "
                   f"of {m.eta_range_samples} tasks; {width}")


class _Progress:
    """Where a long run is, on stderr every 10 s or so (a policy can take minutes)."""

    def __init__(self, policy: str, number: int, policies: int) -> None:
        self.policy, self.number, self.policies = policy, number, policies
        self.began = self.shown = time.monotonic()

    def __call__(self, now: float, started: int, total: int) -> None:
        if time.monotonic() - self.shown < 10.0:
            return
        self.shown = time.monotonic()
        click.echo(f"  {self.policy} ({self.number} of {self.policies}): {started} of {total} tasks started, "
                   f"{_dur(now)} of trace time, {self.shown - self.began:.0f} s", err=True)


def _lost(lost: float, used: float) -> str:
    """GPU-hours stops threw away, and as a share of the work done."""
    return f"{lost:.0f} GPU-h ({lost / used:.2%})" if used > 0 else f"{lost:.0f} GPU-h"


def _dur(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _fgd(trace: "Trace", seed: int, as_json: bool) -> None:
    from argus.sim.fgd import fgd

    results = fgd(trace, seed=seed)
    if as_json:
        click.echo(msgspec.json.encode({"nodes": len(trace.nodes), "gpus": sum(n.gpus for n in trace.nodes),
                                        "placements": results}))
        return
    click.echo(f"FGD procedure on {len(trace.nodes)} nodes ({sum(n.gpus for n in trace.nodes):g} GPUs), seed {seed}: "
               "GPUs allocated when arrived requests reach 100 % and 130 % of capacity")
    for r in results:
        click.echo(f"  {r.placement:13} {r.allocated_at_100:6.2%} {r.allocated_at_130:6.2%}  "
                   f"({r.unallocated_gpus:g} GPUs left free; {r.failed} tasks not placed)")
