"""The read side's assembly: queries that put the projections through the scheduler's pure
functions. The queue in policy order (``queue``), each user's fair-share standing
(``standing``), the fair-share inputs both are computed from (``fair_inputs``), the
estimated starts and dry runs (``eta``), the cluster with its ledger (``cluster``), and
what a reactor starts from (``reactor_start``).

They read the projections and the clock, so they cannot live in ``argus.scheduler``
(which reads neither: docs/design.md §5, and sits below ``projections``); they put the
projections' views through the scheduler's pure functions. Hence a layer of their own,
above the projections and below the API, the reactor and replay.
"""

from argus.views.fair_inputs import FairInputs, read_fair_inputs
from argus.views.queue import FairView, QueueCursor, fair_queue, fair_view, queue_page, queue_position, read_queue
from argus.views.standing import Standing, UserStanding, read_standing

__all__ = [
    "FairInputs",
    "FairView",
    "QueueCursor",
    "Standing",
    "UserStanding",
    "fair_queue",
    "fair_view",
    "queue_page",
    "queue_position",
    "read_fair_inputs",
    "read_queue",
    "read_standing",
]
