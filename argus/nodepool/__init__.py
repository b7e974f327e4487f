"""The stateless Ray node pool (docs/design.md §8, seeds 001 §4–§5 and 003).

The head runs ``ray start --head --block`` under :class:`HeadWatchdog`, which publishes the
discovery record; workers run :class:`WorkerWatchdog`, which joins whatever head the
record names and re-joins when Ray exits or the head changes. supervisord (see
``images/argus-ray-node``) keeps both watchdogs alive.
"""

from argus.nodepool.config import NodePoolConfig, default_ray_bin, parse_resources_kv
from argus.nodepool.discovery import (
    HeadRecord,
    ReadResult,
    expire_head_record,
    make_head_record,
    read_head_record,
    write_head_record,
)
from argus.nodepool.head import HeadWatchdog, head_argv
from argus.nodepool.logline import DecisionLog, format_line
from argus.nodepool.process import RayChild, StopFlag, detect_node_ip, port_open
from argus.nodepool.worker import WorkerWatchdog, worker_argv

__all__ = [
    "DecisionLog",
    "HeadRecord",
    "HeadWatchdog",
    "NodePoolConfig",
    "RayChild",
    "ReadResult",
    "StopFlag",
    "WorkerWatchdog",
    "default_ray_bin",
    "detect_node_ip",
    "expire_head_record",
    "format_line",
    "head_argv",
    "make_head_record",
    "parse_resources_kv",
    "port_open",
    "read_head_record",
    "worker_argv",
    "write_head_record",
]
