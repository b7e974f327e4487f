"""``argus sim``: a discrete-event simulation of admission on a virtual clock, driving the
reactor's own state fold and decision core (``argus.reactor.plan``: the ledger, then the
policy) against the fake Ray port, fed by a production GPU trace (Alibaba's openb) — to
judge scheduling policies by what they do to waits, utilisation and fairness, not by
intuition."""

from argus.sim.engine import SimResult, TaskOutcome, simulate
from argus.sim.metrics import PolicyMetrics, measure
from argus.sim.settings import SimSettings
from argus.sim.trace import GangMix, SimNode, SimTask, Trace, load_openb

__all__ = [
    "GangMix",
    "PolicyMetrics",
    "SimNode",
    "SimResult",
    "SimSettings",
    "SimTask",
    "TaskOutcome",
    "Trace",
    "load_openb",
    "measure",
    "simulate",
]
