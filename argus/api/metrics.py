"""Prometheus ``/metrics`` and the ``/healthz`` / ``/readyz`` probes.

Queue depth, admissions, failures and goodput are read from the projections at scrape
time (so they are right after a restart); append latency and SSE clients are this process's.
"""

from __future__ import annotations

import time
from typing import Any

from litestar import Response, get
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, CounterMetricFamily

from argus.api.events_sse import Broadcaster
from argus.api.reads import Reads
from projections.goodput import CATEGORIES
from projections.goodput_table import GoodputReport
from projections.tasks_read import TaskCounts

__all__ = ["ApiMetrics", "healthz", "metrics", "readyz"]


class _ProjectionCollector:
    """Collects queue/admission/failure figures from the read models at scrape time."""

    def __init__(self) -> None:
        self.counts = TaskCounts(unfinished_by_state={}, attempts=0, failed_by_kind={})
        self.sse_clients = 0
        self.head = 0
        self.goodput: GoodputReport | None = None

    def collect(self) -> Any:
        counts = self.counts
        depth = GaugeMetricFamily("argus_queue_depth", "Unfinished tasks by state", labels=["state"])
        for state, n in counts.unfinished_by_state.items():
            depth.add_metric([state], n)
        yield depth
        adm = CounterMetricFamily("argus_admissions", "Attempts started (admissions)")
        adm.add_metric([], counts.attempts)
        yield adm
        fails = CounterMetricFamily("argus_task_failures", "Failed tasks by failure kind",
                                    labels=["kind"])
        for kind, n in counts.failed_by_kind.items():
            fails.add_metric([kind], n)
        yield fails
        sse = GaugeMetricFamily("argus_sse_clients", "Connected event-stream clients")
        sse.add_metric([], self.sse_clients)
        yield sse
        head = GaugeMetricFamily("argus_log_position", "Last position of the event log")
        head.add_metric([], self.head)
        yield head
        if self.goodput is not None:
            yield from _goodput_metrics(self.goodput)


def _goodput_metrics(report: GoodputReport) -> Any:
    """Goodput per user (docs/runs.md "Goodput"), and the cluster's ratio. Held and waiting
    only grow: counters. A category can shrink (an attempt's steps since its checkpoint move
    from productive to lost when it is restarted): a gauge."""
    held = CounterMetricFamily("argus_gpu_seconds_held", "GPU-seconds held by each user's tasks "
                               "(from admission to each attempt's end)", labels=["user"])
    parts = GaugeMetricFamily("argus_gpu_seconds", "Where the GPU-seconds held went, by category "
                              "(the categories sum to argus_gpu_seconds_held_total)", labels=["user", "category"])
    ratio = GaugeMetricFamily("argus_goodput_ratio", "Productive GPU-seconds / GPU-seconds held", labels=["user"])
    waited = CounterMetricFamily("argus_task_wait_seconds", "Wall seconds each user's tasks waited to be "
                                 "admitted", labels=["user"])
    for row in report.users:
        g = row.goodput
        held.add_metric([row.user], g.held)
        for category in CATEGORIES:
            parts.add_metric([row.user, category], getattr(g, category))
        if g.ratio is not None:
            ratio.add_metric([row.user], g.ratio)
        waited.add_metric([row.user], g.waiting_s)
    cluster = GaugeMetricFamily("argus_cluster_goodput_ratio", "Productive / held GPU-seconds, all users")
    if report.cluster.goodput.ratio is not None:
        cluster.add_metric([], report.cluster.goodput.ratio)
    yield from (held, parts, ratio, waited, cluster)


class ApiMetrics:
    """This app's registry (one per app, so tests can build many apps)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.append_latency = Histogram(
            "argus_append_seconds", "Latency of durable appends (one transaction)",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=self.registry)
        self.append_batches = Counter("argus_append_batches", "Stream batches appended",
                                      registry=self.registry)
        self.projections = _ProjectionCollector()
        self.registry.register(self.projections)  # type: ignore[arg-type]

    def observe_append(self, seconds: float, batches: int) -> None:
        self.append_latency.observe(seconds)
        self.append_batches.inc(batches)

    async def refresh(self, broadcaster: Broadcaster, reads: Reads) -> None:
        self.projections.counts = await reads.task_counts()
        self.projections.sse_clients = len(broadcaster.clients)
        self.projections.head = broadcaster.position
        self.projections.goodput = await reads.goodput(time.time())


@get("/metrics", media_type="text/plain; version=0.0.4", tags=["ops"], include_in_schema=True)
async def metrics(state: State, broadcaster: Broadcaster, reads: Reads) -> Response[bytes]:
    """Prometheus metrics."""
    m: ApiMetrics = state.metrics
    await m.refresh(broadcaster, reads)
    return Response(generate_latest(m.registry), media_type="text/plain; version=0.0.4")


@get("/healthz", tags=["ops"])
async def healthz(state: State) -> dict[str, Any]:
    """The process is alive; ``status`` is ``damaged`` once it has met a damaged event log
    (``damage``: what, each once), and stays so until the log is repaired and the server
    restarted. 200 either way: restarting the process repairs nothing."""
    board = getattr(state, "damage", None)
    if board is not None and board.reports:
        return {"status": "damaged", "damage": list(board.reports)}
    return {"status": "ok"}


@get("/readyz", tags=["ops"], responses={503: ResponseSpec(
    data_container=dict[str, Any], generate_examples=False, description="Not ready: the problems")})
async def readyz(state: State, broadcaster: Broadcaster) -> Response[dict[str, Any]]:
    """Ready to serve: the log answers and the event tailer runs."""
    problems = []
    try:
        await state.store.head_position()
    except Exception as exc:  # report, never raise: this is a probe
        problems.append(f"event store: {exc}")
    if not broadcaster.running:
        problems.append("event tailer is not running")
    body = {"status": "ready" if not problems else "not ready", "problems": problems}
    return Response(body, status_code=200 if not problems else 503)
