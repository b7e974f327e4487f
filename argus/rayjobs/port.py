"""The reactor's port to Ray: the calls it makes, and nothing about how they are made.

``AsyncRayGateway`` (the real Ray, through its Jobs SDK and the GCS) and ``FakeRay`` (in
memory, for fast tests and the simulator) both satisfy it. A structural ``Protocol``, so
neither has to inherit from it, and a test double needs no Ray installed.

The contract every implementation keeps (the reactor's exactly-once rule rests on it):
- ``submit`` raises ``DuplicateSubmission`` when the submission id is already known, and
  ``RayUnavailable`` when Ray cannot be reached (then nothing is known to have happened);
- ``status`` returns None only when Ray has no job with that id;
- every way of not reaching Ray is ``RayUnavailable``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from argus.events.catalog import NodeCapacity, SubmissionPayload
from argus.rayjobs.gateway import AsyncRayGateway, JobObservation

__all__ = ["RayPort"]


@runtime_checkable
class RayPort(Protocol):
    """What the reactor needs from Ray (docs/design.md §1: submit / status / stop / logs)."""

    async def submit(self, payload: SubmissionPayload) -> None:
        """Submit exactly this payload (DuplicateSubmission: the id is taken)."""
        ...

    async def status(self, submission_id: str) -> JobObservation | None:
        """The job's state now, or None when Ray has no job with this id."""
        ...

    async def statuses(self, submission_ids: Collection[str]) -> dict[str, JobObservation | None]:
        """The state of each of these jobs (None: Ray has no such job), in one call to Ray:
        a turn that follows 50 running jobs must not pay Ray's latency 50 times."""
        ...

    async def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job; True if it was still running."""
        ...

    async def logs_tail(self, submission_id: str, max_bytes: int = 65_536) -> str:
        """The last ``max_bytes`` of the driver's log ("" when there is no such job)."""
        ...

    async def capacity(self) -> list[NodeCapacity]:
        """Free resources of every alive worker node, sorted by node id."""
        ...

    async def pending_placements(self, submission_ids: Collection[str]) -> dict[str, list[str]]:
        """For each of these jobs, its placement groups Ray has not placed yet (PENDING),
        by name or id; [] when none is pending. One listing of Ray's placement groups."""
        ...

    def close(self) -> None:
        """Release what the port holds (threads, child processes)."""
        ...


if TYPE_CHECKING:
    def _real_gateway_is_a_port(gateway: AsyncRayGateway) -> RayPort:
        return gateway  # mypy fails here if the gateway's calls drift from the port's
