"""The Ray gateway: submit/follow/stop Ray jobs and read cluster capacity (docs/design.md §1).

``RayPort`` is what the reactor needs; ``AsyncRayGateway`` is the real Ray behind it and
``argus.rayjobs.fake.FakeRay`` an in-memory one for tests and simulation.

Importing this package does not import Ray; Ray is loaded on first use.
"""

from argus.rayjobs.gateway import (
    WORKER_RESOURCE,
    AsyncRayGateway,
    DuplicateSubmission,
    JobObservation,
    RayGateway,
    RayUnavailable,
)
from argus.rayjobs.port import RayPort
from argus.rayjobs.submission import (
    DriverContext,
    attempt_of,
    build_submission,
    decode_context,
    encode_context,
    job_dir,
    pinned_model,
    submission_id_for,
)

__all__ = [
    "AsyncRayGateway",
    "DriverContext",
    "DuplicateSubmission",
    "JobObservation",
    "RayGateway",
    "RayPort",
    "RayUnavailable",
    "WORKER_RESOURCE",
    "attempt_of",
    "build_submission",
    "decode_context",
    "encode_context",
    "job_dir",
    "pinned_model",
    "submission_id_for",
]
