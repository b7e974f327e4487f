"""ETAs in the simulator: every Nth arriving task that has to wait is given the estimate a
user would see (``argus.scheduler.eta``, from the same policy inputs as the API's), to be
compared with its real start when the run is over."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from argus.config import SchedulerConfig
from argus.reactor.state import ReactorState
from argus.scheduler import PolicyConfig
from argus.scheduler.eta import DEFAULT_HORIZON, estimate_starts
from argus.scheduler.eta_calibration import EtaCalibration, StartRange
from argus.scheduler.inputs import policy_inputs
from argus.scheduler.order import queue_order

__all__ = ["EtaFigures", "EtaSampler"]


class EtaFigures(msgspec.Struct, frozen=True, kw_only=True):
    errors: list[float]  # |ETA - real start| of each sampled task that started
    waits: list[float]  # their real waits
    coarse: list[bool]  # theirs: past the horizon (the coarse estimate)
    unknown: int  # sampled waiting tasks given no ETA
    # The 80 % intervals (argus.scheduler.eta_calibration) of the sampled tasks that started
    # and got one: whether the real start fell inside, the interval's width, the real wait.
    inside: list[bool] = []
    widths: list[float] = []
    range_waits: list[float] = []


class EtaSampler:
    """Asks for the ETAs of sampled arrivals (``every`` N > 0: every Nth) that wait."""

    def __init__(self, every: int, sched: SchedulerConfig) -> None:
        self.every, self.sched = every, sched
        self.arrivals = 0
        self.predicted: dict[str, float] = {}  # task id -> ETA (-1: none given)
        self.coarse: set[str] = set()  # past the forward run's horizon
        self.ranges: dict[str, StartRange] = {}  # task id -> its interval, when it got one
        # Learns online, as the API's board does, from the first ETA of every task in line
        # at each sample (not only the sampled ones) as their tasks start: an interval given
        # at an instant knows only the starts before it.
        self.calibration = EtaCalibration()

    def sample(self, arrived: list[str], state: ReactorState, now: float, started: Mapping[str, float]) -> None:
        """Give ETAs to the sampled tasks among ``arrived`` that wait; ``started``: each task's
        first start so far (the simulation's own record: the reactor's state forgets a task
        once it ends, and a task that started and ended between two samples would never be
        scored, and be counted as missed once its latest start passed)."""
        if not self.every:
            return
        asked = []
        for task_id in arrived:
            self.arrivals += 1
            if self.arrivals % self.every == 0 and task_id in state.tasks and state.tasks[task_id].state.is_waiting():
                asked.append(task_id)
        if not asked:
            return
        for task_id, given in list(self.calibration.pending.items()):  # the starts since: scores
            at = started.get(task_id)
            if at is not None and at >= given.given_at:
                self.calibration.started(task_id, at)
        self.calibration.overdue(now)
        waiting, active = state.waiting(), state.active()
        queue, running, capacity = policy_inputs(
            waiting=waiting, active=active, capacity=state.last_capacity, now=now, config=self.sched,
            runtimes=state.runtimes, releasing=list(state.releasing.values()))
        usage = state.usage.with_running(now, active) if self.sched.policy == "fairshare" else {}
        config = PolicyConfig.from_scheduler(self.sched, usage=usage)
        line = queue_order(config.policy, queue)
        assert capacity is not None
        etas = estimate_starts(line, running, capacity, now, config, in_line=True)
        ahead = {q.task_id for q in line[:DEFAULT_HORIZON]}
        ranges = self.calibration.give_line(now, etas, ahead)  # every ETA in line, as the API's board
        for task_id in asked:
            eta = self.predicted[task_id] = etas.get(task_id, -1.0)
            if task_id in ranges:
                self.ranges[task_id] = ranges[task_id]
            if eta >= 0 and task_id not in ahead:
                self.coarse.add(task_id)

    def result(self, started: dict[str, float], arrivals: dict[str, float]) -> EtaFigures:
        """How the sampled ETAs came out, given each task's arrival and first start."""
        sampled = [(t, eta) for t, eta in self.predicted.items() if eta >= 0 and t in started]
        ranged = [(t, r) for t, r in self.ranges.items() if t in started]
        return EtaFigures(errors=[abs(started[t] - eta) for t, eta in sampled],
                          waits=[started[t] - arrivals[t] for t, _ in sampled],
                          coarse=[t in self.coarse for t, _ in sampled],
                          unknown=sum(1 for eta in self.predicted.values() if eta < 0),
                          inside=[r.earliest <= started[t] <= r.latest for t, r in ranged],
                          widths=[r.latest - r.earliest for _, r in ranged],
                          range_waits=[started[t] - arrivals[t] for t, _ in ranged])
