"""Issue 56's scheduling figures on the openb trace's 60-node subset, seed by seed.

    python tests/bench/bench_gpu_models.py CASE [--seeds 0-7] [--trace-dir DIR] [--json OUT]

CASE is one line of docs/evaluation/2026-12-03-gpu-models-and-churn.md:

- ``models``: the GPU-model variant (``--gpu-model-mix 0.33:0.1``): ``reserve-backfill``
  and ``fairshare`` with preemption (half the tasks preemptible); per seed, busy
  utilisation, the longest wait, the longest wait of each model's tasks and how many
  any-model tasks were admitted onto a model's nodes while a task needing that model waited.
- ``pinned``: the plain trace, preemption off: ``reserve-backfill`` and ``fairshare``, and
  both as before 2026-12-03 (one reservation, best-fit over every model; no keep-off).
- ``churn``: the plain trace, ``fairshare`` with preemption (half preemptible), a minimum
  run of 15 s (the default) and of 30 minutes: preemptions and busy utilisation.

Every run is ``load 1.2, 5 % 2x8 gangs`` as Argus ships, one seed after another (each
takes a minute or so on a quiet core; ``--limit N`` takes the first N tasks only). Prints a
line per seed and run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from argus.sim import SimSettings, simulate  # noqa: E402
from argus.sim.engine import SimResult  # noqa: E402
from argus.sim.metrics import measure  # noqa: E402
from argus.sim.trace import GangMix, Marks, ModelMix, Trace, load_openb  # noqa: E402


# What reserve-backfill did before 2026-12-03: one reservation, best-fit over every model
_BEFORE = {"reserve_per_model": False, "minor_models_last": False}


class Row(msgspec.Struct, kw_only=True):
    case: str
    seed: int
    run: str
    util_busy: float
    wait_max_h: float
    preemptions: int
    model_wait_max_h: dict[str, float] = {}  # per model named: its tasks' longest wait
    any_on_model_while_waiting: dict[str, int] = {}  # per model: any-model admissions onto its nodes meanwhile


def _per_model(trace: Trace, result: SimResult) -> tuple[dict[str, float], dict[str, int]]:
    """Each named model's longest wait, and how many any-model tasks were admitted onto
    that model's nodes while a task needing it waited (arrival to first start)."""
    by_id = {t.task_id: t for t in trace.tasks}
    node_model = {n.node_id: n.gpu_type for n in trace.nodes}
    waits: dict[str, float] = {}
    spans: dict[str, list[tuple[float, float]]] = {}
    for o in result.outcomes:
        models = by_id[o.task_id].demand.gpu_types
        if not models:
            continue
        end = o.start if o.start is not None else float("inf")
        for m in models:
            waits[m] = max(waits.get(m, 0.0), (end if o.start is not None else end) - o.arrival)
            spans.setdefault(m, []).append((o.arrival, end))
    crowded = {m: 0 for m in waits}
    for at, task_id, kind, nodes in result.decision_log:
        if kind != "admitted" or by_id[task_id].demand.gpu_types:
            continue
        for m in {node_model[n] for n in nodes} & crowded.keys():
            if any(a < at < b for a, b in spans[m]):
                crowded[m] += 1
    return {m: w / 3600 for m, w in sorted(waits.items())}, dict(sorted(crowded.items()))


def _run(case: str, seed: int, run: str, trace: Trace, policy: str, **kw: object) -> Row:
    result = simulate(trace, policy, SimSettings(**kw))  # type: ignore[arg-type]
    m = measure(result)
    waits, crowded = _per_model(trace, result)
    row = Row(case=case, seed=seed, run=run, util_busy=m.contended_utilization, wait_max_h=m.wait_max_s / 3600,
              preemptions=m.preemptions, model_wait_max_h=waits, any_on_model_while_waiting=crowded)
    models = " ".join(f"{k} {v:.1f}h/{crowded[k]}" for k, v in waits.items())
    print(f"{case} seed {seed} {run:28} util_busy {row.util_busy:.3f} wait_max {row.wait_max_h:7.1f} h "
          f"preempted {row.preemptions:5d}" + (f"  per model (wait max/any-model admitted meanwhile): {models}"
                                                if models else ""), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["models", "pinned", "churn"])
    parser.add_argument("--seeds", default="0-7", help="e.g. 0-7 or 0,3")
    parser.add_argument("--trace-dir", type=Path, default=REPO.parent / "shared" / "traces" / "openb")
    parser.add_argument("--runs", default="", help="only these runs (comma-separated names)")
    parser.add_argument("--limit", type=int, default=None,
                        help="only the first N tasks by arrival (argus sim --limit): a shorter run")
    parser.add_argument("--json", type=Path, default=None, help="append the rows here as JSON lines")
    args = parser.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi) + 1) if hi else [int(s) for s in args.seeds.split(",")]
    pods, nodes = args.trace_dir / "openb_pod_list_default.csv", args.trace_dir / "openb_node_list_gpu_node.csv"
    cases: dict[str, list[tuple[str, str, dict[str, object]]]] = {
        "models": [("reserve-backfill", "reserve-backfill", {}),
                   ("fairshare+preemption", "fairshare", {"preemption": True}),
                   ("reserve-backfill before", "reserve-backfill", dict(_BEFORE))],
        "pinned": [("reserve-backfill", "reserve-backfill", {}), ("fairshare", "fairshare", {}),
                   ("reserve-backfill before", "reserve-backfill", dict(_BEFORE)),
                   ("fairshare before", "fairshare", {"move_after_s": 0.0, **_BEFORE})],
        "churn": [("fairshare+preemption min-run 15s", "fairshare", {"preemption": True, "preempt_min_run_s": 15.0}),
                  ("fairshare+preemption min-run 30m", "fairshare", {"preemption": True, "preempt_min_run_s": 1800.0})],
    }
    runs = cases[args.case]
    only = set(filter(None, args.runs.split(",")))
    for seed in seeds:
        preemptible = 0.5 if args.case in ("models", "churn") else 0.0
        trace = load_openb(pods, nodes, nodes_subset=60, load=1.2, gang_mix=GangMix.parse("0.05:2x8"), seed=seed,
                           limit=args.limit,
                           marks=Marks.parse(None, preemptible),
                           model_mix=ModelMix.parse("0.33:0.1") if args.case == "models" else None)
        for run, policy, kw in runs:
            if only and run not in only:
                continue
            row = _run(args.case, seed, run, trace, policy, **kw)
            if args.json is not None:
                with open(args.json, "ab") as f:
                    f.write(msgspec.json.encode(row) + b"\n")


if __name__ == "__main__":
    main()
