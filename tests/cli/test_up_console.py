"""What `argus up` tells its console about its Ray nodes after "cluster ready"."""

from __future__ import annotations

import shutil
from pathlib import Path

from argus.cli.serve import Stack
from argus.config import ArgusConfig
from argus.nodepool.logline import format_line


def _stack(tmp_path: Path, said: list[str]) -> Stack:
    stack = Stack(tmp_path, ArgusConfig(), gpus=1, cpus=5, echo=said.append)
    shutil.rmtree(stack.temp_dir)  # not started: no Ray temp dir needed
    stack.roles = {"head": lambda: {}, "worker": lambda: {}}
    return stack


def test_a_ray_node_that_exits_is_reported_once_with_where_to_look(tmp_path: Path) -> None:
    said: list[str] = []
    stack = _stack(tmp_path, said)
    log = tmp_path / "logs" / "worker.log"
    log.parent.mkdir()
    exited = format_line("WARNING", "ray_exited", {"role": "worker", "rc": 1, "ran_s": 13.0})
    log.write_text("earlier run's line\n" + format_line("INFO", "ray_start", {"role": "worker"}) + "\n"
                   + "(raylet) The raylet exited immediately because one Ray agent failed\n" + exited + "\n"
                   + exited[:20])  # the next line, still being written
    stack._report_node_exits()
    assert said == [f"worker: its Ray node exited (rc=1 after 13.0 s); it is being restarted. Why: {log}"]
    stack._report_node_exits()
    assert len(said) == 1  # each line is said once
    with open(log, "a") as f:
        f.write(exited[20:] + "\n")  # the line completed: said now
    stack._report_node_exits()
    assert len(said) == 2


def test_only_this_runs_lines_count(tmp_path: Path) -> None:
    """The logs are appended to across runs of `argus up`: an exit of an earlier run is
    not news (start() records where each log ended)."""
    said: list[str] = []
    stack = _stack(tmp_path, said)
    log = tmp_path / "logs" / "head.log"
    log.parent.mkdir()
    log.write_text(format_line("ERROR", "ray_exited", {"role": "head", "rc": 1, "ran_s": 2.0}) + "\n")
    stack._log_read["head"] = log.stat().st_size  # as start() records it
    stack._report_node_exits()
    assert said == []
