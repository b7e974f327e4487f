"""Where Ray is: from the config, or from the head's discovery file (docs/design.md §8)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from argus.config import ArgusConfig

if TYPE_CHECKING:
    from argus.rayjobs.gateway import RayGateway

__all__ = ["RayTarget", "RayTargetUnknown", "following_gateway", "resolve_ray_target"]


class RayTargetUnknown(RuntimeError):
    """No address configured and no fresh discovery record to read one from."""


class RayTarget(msgspec.Struct, frozen=True):
    job_server_url: str
    gcs_address: str


def resolve_ray_target(config: ArgusConfig) -> RayTarget:
    """``address: http://head:8265`` (with ``gcs_address``) is used as given;
    ``address: auto`` reads ``<shared>/ray/discovery/<cluster>/head.json``."""
    if config.address and config.address != "auto":
        gcs = config.gcs_address
        if not gcs:
            host = config.address.split("://", 1)[-1].rsplit(":", 1)[0]
            gcs = f"{host}:6379"
        return RayTarget(job_server_url=config.address, gcs_address=gcs)
    from argus.nodepool.discovery import read_head_record

    result = read_head_record(config.discovery_file(), cluster_name=config.cluster_name)
    if result.reason != "ok" or result.record is None:
        raise RayTargetUnknown(
            f"no fresh head record at {config.discovery_file()} ({result.reason}); start the "
            "head (argus node head) or set `address` in the config"
        )
    return RayTarget(job_server_url=result.record.job_server_url, gcs_address=result.record.gcs_address)


def following_gateway(config: ArgusConfig) -> "RayGateway":
    """A gateway that finds Ray anew before each call (config, else the discovery record):
    a head that restarts or moves is followed, and no head yet is only RayUnavailable."""
    from argus.rayjobs.gateway import RayGateway

    def locate() -> tuple[str, str]:
        target = resolve_ray_target(config)
        return target.job_server_url, target.gcs_address

    return RayGateway.following(locate)
