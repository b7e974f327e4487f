"""What `argus up` tells its console about its Ray nodes after "cluster ready"."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from argus.cli.stack import Stack
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
    cause = ("Ray's raylet timed out waiting for its dashboard agent: the host is overloaded "
             "(load 34 on 2 cores)")
    exited = format_line("WARNING", "ray_exited", {"role": "worker", "rc": 1, "ran_s": 13.0,
                                                   "cause": cause})
    log.write_text("earlier run's line\n" + format_line("INFO", "ray_start", {"role": "worker"}) + "\n"
                   + "(raylet) The raylet exited immediately because one Ray agent failed\n" + exited + "\n"
                   + exited[:20])  # the next line, still being written
    stack._report_node_exits()
    assert said == [f"worker: its Ray node exited (rc=1 after 13.0 s): {cause}; it is being "
                    f"restarted. Details: {log}"]
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


def test_a_restart_says_ready_only_from_what_this_start_brings(tmp_path: Path) -> None:
    """A restarted `argus up` finds the last run's discovery file and the last run's nodes
    in its log: "cluster ready" must wait for this run's head and a new observation."""
    import threading
    import time as clock
    from datetime import datetime, timezone

    from argus.events import cluster_stream
    from argus.nodepool.discovery import make_head_record, write_head_record
    from argus.cli.serve import report_progress
    from projections import open_store
    from tests.events import factories as f

    async def append_to(path: str, event: object) -> None:
        store = await open_store(path, synchronous="NORMAL")
        try:
            await store.append(cluster_stream, None, [event])
        finally:
            await store.close()

    def append(event: object) -> None:
        asyncio.run(append_to(config.v2.sqlite.db_path, event))

    config = ArgusConfig(shared_root=str(tmp_path / "shared"))
    config.v2.sqlite.db_path = str(tmp_path / "argus.sqlite3")
    config.discovery_file().parent.mkdir(parents=True)
    earlier = clock.time() - 3600
    last_run = datetime.fromtimestamp(earlier, timezone.utc)
    write_head_record(config.discovery_file(), make_head_record(
        cluster_name=config.cluster_name, head_ip="127.0.0.1", gcs_port=6379, dashboard_port=8265,
        ttl_s=7200, started_at=last_run))
    append(f.capacity({"w-old": 4}, at=earlier))

    said: list[str] = []
    stopping = threading.Event()
    since = clock.time()
    progress = threading.Thread(target=report_progress, args=(config, stopping, said.append, since), daemon=True)
    progress.start()
    clock.sleep(2.5)
    assert not [s for s in said if "Ray head up" in s or "cluster ready" in s], said
    write_head_record(config.discovery_file(), make_head_record(
        cluster_name=config.cluster_name, head_ip="127.0.0.1", gcs_port=6380, dashboard_port=8266, ttl_s=60))
    append(f.capacity({"w-new": 4}, at=clock.time()))
    progress.join(10)
    stopping.set()
    assert [s.split(" ")[0] for s in said[1:]] == ["Ray", "worker"], said
    assert "127.0.0.1:6380" in said[1] and "cluster ready" in said[2]


def test_up_on_a_copy_of_a_shared_log_without_its_url_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    """A newcomer who moved to PostgreSQL and then ran `argus up` without the URL: the
    file is the shared log's copy, so nothing starts and one line says what to do."""
    import sqlite3

    from click.testing import CliRunner

    from argus.cli import main
    from argus.store import migrate

    data = tmp_path / "data"
    data.mkdir()
    migrate(data / "argus.sqlite3")
    with sqlite3.connect(data / "argus.sqlite3") as db:
        db.execute("INSERT INTO copy_of VALUES (1, 'postgresql://argus:***@db:5432/argus', 0)")
    r = CliRunner().invoke(main, ["up", "--data-dir", str(data)], env={"ARGUS_CONFIG": ""})
    assert r.exit_code == 1, r.output
    assert "is this host's copy of the event log shared through PostgreSQL at postgresql://argus:***@db" in r.output
    assert "Argus is up" not in r.output and "Traceback" not in r.output
    assert not (data / "logs").exists()  # no Ray node was started


def test_an_event_log_that_cannot_be_opened_is_one_line_naming_what_failed(tmp_path: Path) -> None:
    """A copy's folder that does not exist is the local file's fault, not PostgreSQL's; a
    server that does not answer is named, its password hidden."""
    import socket

    import click
    import pytest

    from argus.cli.serve import open_event_log_once

    config = ArgusConfig(shared_root=str(tmp_path / "shared"))
    config.v2.sqlite.db_path = str(tmp_path / "no-such-folder" / "copy.sqlite3")
    with pytest.raises(click.ClickException, match=r"event log's file .*no-such-folder/copy\.sqlite3.*folder exist"):
        open_event_log_once(config)
    pytest.importorskip("asyncpg")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    config.v2.sqlite.db_path = str(tmp_path / "copy.sqlite3")
    config.v2.postgres.url = f"postgresql://argus:s3cret@127.0.0.1:{closed}/argus"
    with pytest.raises(click.ClickException) as refused:
        open_event_log_once(config)
    assert "is PostgreSQL running" in refused.value.message and "s3cret" not in refused.value.message
