"""An attempt's output within its budget (``argus.rayjobs.output``), through the driver's own
``run_command`` (a real subprocess printing tens of MB): ``driver.log`` keeps the head and
the last bytes, says how much it dropped, and stays within the budget plus a few lines on
disk while the command runs and after; Ray's copy (the driver's stdout) is smaller still;
the reports carry the count; ``on_exceed: stop`` stops the command."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import pytest

from argus.config import ArgusConfig, ConfigError, load_config
from argus.driver import prepare_job_dir, run_command
from argus.rayjobs.output import BoundedOutput, OutputLimits
from argus.rayjobs.reports import read_exit
from argus.rayjobs.submission import build_submission, decode_context, output_limits
from argus.taskspec.sizes import parse_bytes

MiB = 1 << 20
# Numbered lines: the head must start with line 0 and the tail end with the last one.
PRINT = (f"{sys.executable} -c \"import sys\nw = sys.stdout.write\n"
         "for i in range({n}): w('line %09d ' % i + 'x' * 80 + '\\n')\nprint('THE-END')\"")
LINE = len("line 000000000 ") + 80 + 1


def _ctx(tmp_path: Path, command: str, budget: int, stop: bool = False, ray_copy: int = 256 * 1024):
    shared = tmp_path / "shared"
    (shared / "users" / "alice" / "code").mkdir(parents=True, exist_ok=True)
    config = ArgusConfig(shared_root=str(shared))
    config.v2.sandbox.mode = "none"
    payload = build_submission(task_id="alice-ppo-20261203-101500-ab12", attempt_no=1, user="alice",
                               command=command, config=config, python=sys.executable)
    ctx = decode_context(payload.entrypoint.split("--context ", 1)[1])
    return msgspec.structs.replace(ctx, output=OutputLimits(budget_bytes=budget, ray_copy_bytes=ray_copy,
                                                            stop_over=stop))


def _on_disk(folder: Path) -> int:
    total = 0
    for entry in os.scandir(folder):
        if entry.name.startswith("driver.log"):
            try:
                total += entry.stat().st_size
            except FileNotFoundError:  # renamed while we looked
                pass
    return total


def test_a_chatty_command_keeps_its_head_and_tail_within_the_budget(tmp_path: Path) -> None:
    budget = 2 * MiB
    lines = 40 * MiB // LINE  # 40 MiB printed, twenty times the budget
    ctx = _ctx(tmp_path, PRINT.format(n=lines), budget)
    folder = prepare_job_dir(ctx)
    most = [0]
    done = threading.Event()

    def watch() -> None:  # what is on disk while it runs
        while not done.is_set():
            most[0] = max(most[0], _on_disk(folder))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    out = io.BytesIO()
    try:
        result = run_command(ctx, folder, out=out)
    finally:
        done.set()
        watcher.join()
    assert result.exit_code == 0
    log = (folder / "driver.log").read_bytes()
    assert not list(folder.glob("driver.log.tail*"))  # folded into driver.log at the end
    overhead = 4096  # the driver's own lines
    assert budget < len(log) <= budget + overhead
    assert most[0] <= budget + budget // 4 + overhead, most[0]
    assert log.index(b"\nline 000000000 ") < overhead  # right after the driver's header
    assert f"line {budget // 2 // LINE - 1:09d} ".encode() in log[:budget // 2 + overhead]  # the head, whole
    assert log.rstrip().endswith(b"THE-END")
    assert f"line {lines - 1:09d} ".encode() in log[-budget // 2:]
    total = lines * LINE + len("THE-END\n")
    dropped = total - budget
    assert f"output: {total} bytes printed, {dropped} dropped".encode() in log
    # Ray's copy: the first and last halves of ray_copy_bytes, and a line saying what is not there.
    copy = out.getvalue()
    assert len(copy) <= 256 * 1024 + 2 * overhead
    assert b"line 000000000 " in copy and copy.rstrip().endswith(b"THE-END")
    assert b"bytes of the output are not in Ray's job log" in copy
    # The exit report carries the count (the reactor records AttemptOutputTruncated from it).
    report = read_exit(ctx.shared_root, ctx.submission_id)
    assert report is not None and report.output is not None
    assert (report.output.total_bytes, report.output.dropped_bytes, report.output.stopped) == (total, dropped, False)


def test_a_command_within_its_budget_keeps_everything(tmp_path: Path) -> None:
    lines = 5000
    ctx = _ctx(tmp_path, PRINT.format(n=lines), budget=2 * MiB, ray_copy=64 * 1024)
    folder = prepare_job_dir(ctx)
    out = io.BytesIO()
    assert run_command(ctx, folder, out=out).exit_code == 0
    log = (folder / "driver.log").read_bytes()
    for i in (0, 1, lines // 2, lines - 1):  # every line, once
        assert log.count(f"line {i:09d} ".encode()) == 1
    assert b"dropped" not in log
    report = read_exit(ctx.shared_root, ctx.submission_id)
    assert report is not None and report.output is None


def test_stop_over_the_budget_stops_the_command_and_says_so(tmp_path: Path) -> None:
    forever = f"{sys.executable} -c \"import sys\nwhile True: sys.stdout.write('y' * 1000 + '\\n')\""
    ctx = _ctx(tmp_path, forever, budget=256 * 1024, stop=True, ray_copy=64 * 1024)
    folder = prepare_job_dir(ctx)
    out = io.BytesIO()
    result = run_command(ctx, folder, out=out)
    assert result.exit_code != 0
    assert out.getvalue().rstrip().endswith(b"(v2.output.on_exceed: stop; a spec may raise its output_budget)")
    report = read_exit(ctx.shared_root, ctx.submission_id)
    assert report is not None and report.output is not None and report.output.stopped
    assert (folder / "driver.log").stat().st_size <= 256 * 1024 + 4096


def test_a_link_a_job_left_for_its_tail_is_never_written_through_nor_copied(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"SECRET of another user\n")
    budget = 128 * 1024
    output = BoundedOutput(folder, OutputLimits(budget_bytes=budget, ray_copy_bytes=0), io.BytesIO())
    output.feed(b"a" * (budget // 2 + 10))  # the tail file exists now
    (folder / "driver.log.tail").unlink()
    (folder / "driver.log.tail").symlink_to(victim)  # as a job in its own folder could
    (folder / "driver.log.tail.3").symlink_to(victim)
    output.feed(b"b" * budget)
    output.close()
    assert victim.read_bytes() == b"SECRET of another user\n"
    assert b"SECRET" not in (folder / "driver.log").read_bytes()


def test_the_budget_comes_from_the_admin_and_a_spec_may_change_it_within_the_cap() -> None:
    config = load_config(environ={"ARGUS_V2__OUTPUT__BUDGET_BYTES": str(8 * MiB),
                                  "ARGUS_V2__OUTPUT__MAX_BUDGET_BYTES": str(64 * MiB),
                                  "ARGUS_V2__OUTPUT__ON_EXCEED": "stop"})
    assert output_limits(config, {}).budget_bytes == 8 * MiB
    assert output_limits(config, {}).stop_over
    assert output_limits(config, {"output_budget": "32MiB"}).budget_bytes == 32 * MiB
    assert output_limits(config, {"output_budget": "1GiB"}).budget_bytes == 64 * MiB  # the cap holds
    payload = build_submission(task_id="t", attempt_no=1, user="u", command="true", config=config,
                               spec={"output_budget": "32MiB", "env": 1},
                               env_vars={"RAY_ROTATION_MAX_BYTES": "0"})  # a spec cannot lift it
    assert payload.runtime_env["env_vars"]["RAY_ROTATION_MAX_BYTES"] == str(4 * MiB)
    assert payload.runtime_env["env_vars"]["RAY_ROTATION_BACKUP_COUNT"] == "1"
    with pytest.raises(ConfigError, match="budget_bytes must be at least"):
        load_config(environ={"ARGUS_V2__OUTPUT__BUDGET_BYTES": "10"})
    assert parse_bytes("1.5 GiB") == 3 * (1 << 29) and parse_bytes("2GB") == 2_000_000_000
    for bad in ("lots", "12 parsecs", "inf", ""):
        with pytest.raises(ValueError, match="not a size"):
            parse_bytes(bad)


def test_the_driver_as_ray_runs_it_prints_only_the_small_copy(tmp_path: Path) -> None:
    """``python -m argus.driver`` in a real subprocess: what Ray's job log would hold."""
    ctx = _ctx(tmp_path, PRINT.format(n=20 * MiB // LINE), budget=MiB, ray_copy=128 * 1024)
    from argus.rayjobs.submission import encode_context

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-m", "argus.driver", "--context", encode_context(ctx)],
                          capture_output=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout) <= 128 * 1024 + 8192
    assert done.stdout.rstrip().endswith(b"[argus.driver] exit code 0")


def test_driver_log_is_whole_when_the_exit_report_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reactor ends an attempt on its exit report: by then ``driver.log`` holds the
    command's last line and, past the budget, the kept tail (it used to be written after
    the report, and a task could show SUCCEEDED with the end of its log not yet there)."""
    from argus.rayjobs import reports

    seen: list[str] = []
    exited = reports.ProgressTracker.exited

    def look_then_exit(self: reports.ProgressTracker, exit_code: int, host_clean: bool = False) -> None:
        seen.append((folder / "driver.log").read_text())
        exited(self, exit_code, host_clean)

    monkeypatch.setattr(reports.ProgressTracker, "exited", look_then_exit)
    ctx = _ctx(tmp_path, PRINT.format(n=4 * MiB // LINE), MiB)  # 4 MiB printed, 1 MiB kept
    folder = prepare_job_dir(ctx)
    run_command(ctx, folder, out=io.BytesIO())
    assert len(seen) == 1 and seen[0].rstrip().endswith("THE-END"), seen[0][-300:] if seen else "no exit report"
    assert "dropped" in seen[0]
