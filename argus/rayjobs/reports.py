"""What a job's driver reports to Argus about its attempt, over files only the driver can
write: a heartbeat with the training's progress, and the command's exit the moment it exits.

Where: ``<shared>/ray/attempts/`` — the control plane's folder of the shared root, out of
every confined job's reach (docs/security.md: a confined process sees its home and the
shared read-only folders). The driver runs outside the confinement it puts its command in,
so it can write there and the command cannot: the command can neither forge a report nor
replay an old one, for its own attempt or another's. Each attempt has its own two files,
named by its submission id:

- ``progress/<sid>.json`` (``ProgressReport``): rewritten (atomically) when the step moves,
  at most every ``PROGRESS_EVERY_S``, and every ``HEARTBEAT_S`` without news;
- ``exits/<sid>.json`` (``ExitReport``): written once, when the command exits. A new entry
  in ``exits/`` changes the folder's mtime, which the reactor watches (one ``stat`` however
  many attempts run) to end the attempt without waiting for its next look at Ray.

What the driver reads of the command's output to know the step: verl's console lines,
``step:N - key:value - …`` (``verl.utils.logger.aggregate_logger.concat_dict_to_str``), and
``Total training steps: N`` (``verl.trainer.ppo.ray_trainer.RayPPOTrainer._create_dataloader``,
``verl.trainer.sft_trainer_ray``); the example trainer prints the same.

Reading is bounded and never follows a link (an unconfined job could still write there).
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import msgspec

from argus import safefs
from argus.nodepool.stacks import attempts_dir

__all__ = [
    "ExitReport", "OutputSummary", "ProgressReport", "ProgressTracker", "attempts_dir", "exits_dir", "read_exit", "read_progress",
    "write_exit",
]

HEARTBEAT_S = 10.0  # a progress file is rewritten at least this often while the command runs
PROGRESS_EVERY_S = 1.0  # ... and at most this often when the step moves
MAX_REPORT_BYTES = 4096
_RECENT_STEPS = 20  # step times kept for the median
_STEP = re.compile(rb"(?:^|[\s(])step:(\d{1,9})\b", re.M)
_TOTAL = re.compile(rb"Total training steps: (\d{1,9})")
_CARRY = 256  # bytes of an unfinished line kept for the next chunk


class OutputSummary(msgspec.Struct, frozen=True, kw_only=True):
    """The command's output passed its budget (``argus.rayjobs.output``): how much it
    printed, how much is kept (its head and its tail) and dropped; ``stopped``: the driver
    stopped the command for it (``v2.output.on_exceed: stop``)."""

    budget_bytes: int
    total_bytes: int
    kept_bytes: int
    dropped_bytes: int
    stopped: bool = False


class ProgressReport(msgspec.Struct, frozen=True, kw_only=True):
    """How far the attempt's training got, as its driver saw it at ``heartbeat_at``."""

    submission_id: str
    heartbeat_at: float
    started_at: float  # when the command started
    step: int | None = None  # the last step printed
    step_at: float | None = None  # when it was printed
    first_step: int | None = None  # the first step this attempt printed (a resume starts past 1)
    total_steps: int | None = None  # what the trainer said it will train
    step_time_s: float | None = None  # median of its recent steps' times
    output: OutputSummary | None = None  # set once the output passed its budget


class ExitReport(msgspec.Struct, frozen=True, kw_only=True):
    """The command exited with ``exit_code`` (128 + N: killed by signal N) at ``exited_at``."""

    submission_id: str
    exit_code: int
    exited_at: float
    step: int | None = None  # the last step it printed
    first_step: int | None = None  # the first (a resume starts past 1)
    total_steps: int | None = None
    # No other process of the attempt was left on the driver's host when it reported: its
    # node may admit again at once (argus.reactor.clearing); False: unknown or some were.
    host_clean: bool = False
    output: OutputSummary | None = None  # set when the output passed its budget


def exits_dir(shared_root: str) -> Path:
    return attempts_dir(shared_root) / "exits"


def _write(folder: Path, name: str, body: bytes) -> None:
    safefs.write_atomic(folder / name, body)


def _read(folder: Path, name: str) -> bytes | None:
    return safefs.read_bounded(folder / name, MAX_REPORT_BYTES)


def write_exit(shared_root: str, report: ExitReport) -> None:
    _write(exits_dir(shared_root), f"{report.submission_id}.json", msgspec.json.encode(report))


def read_exit(shared_root: str, submission_id: str) -> ExitReport | None:
    """The attempt's exit report (None: none, or not a report of that attempt)."""
    return _decode(_read(exits_dir(shared_root), f"{submission_id}.json"), ExitReport, submission_id)


def read_progress(shared_root: str, submission_id: str) -> ProgressReport | None:
    """The attempt's last progress report (None: none, or not a report of that attempt)."""
    return _decode(_read(attempts_dir(shared_root) / "progress", f"{submission_id}.json"), ProgressReport,
                   submission_id)


_R = TypeVar("_R", ExitReport, ProgressReport)


def _decode(body: bytes | None, kind: type[_R], submission_id: str) -> _R | None:
    if body is None or len(body) > MAX_REPORT_BYTES:
        return None
    try:
        report = msgspec.json.decode(body, type=kind)
    except msgspec.DecodeError:  # (and ValidationError) not a report: half a file, or not ours
        return None
    return report if report.submission_id == submission_id else None


class ProgressTracker:
    """The driver's side: fed the command's output as it comes, writes the progress file
    when there is news (at most every ``PROGRESS_EVERY_S``) or a heartbeat is due, and the
    exit report at the end."""

    def __init__(self, shared_root: str, submission_id: str, clock: Callable[[], float] = time.time) -> None:
        self.shared_root, self.submission_id, self.clock = shared_root, submission_id, clock
        self.started_at = clock()
        self.step: int | None = None
        self.step_at: float | None = None
        self.first_step: int | None = None
        self.total_steps: int | None = None
        self._times: list[float] = []
        self._carry = b""
        self._written_at = -1e18
        self._news = True
        self.output: OutputSummary | None = None  # the driver sets it as the output grows
        self._output_said = False

    def feed(self, chunk: bytes) -> None:
        """Read the steps out of a chunk of the command's output."""
        text = self._carry + chunk
        cut = text.rfind(b"\n") + 1
        self._carry = text[cut:][-_CARRY:]
        lines = text[:cut]
        if b"step" not in lines and b"Total" not in lines:
            return
        if (total := _TOTAL.findall(lines)) and int(total[-1]) > 0:
            self.total_steps, self._news = int(total[-1]), True
        for found in _STEP.findall(lines):
            self._stepped(int(found))

    def _stepped(self, step: int) -> None:
        now = self.clock()
        if self.step is not None and step == self.step + 1 and self.step_at is not None:
            self._times = (self._times + [now - self.step_at])[-_RECENT_STEPS:]
        if self.first_step is None:
            self.first_step = step
        if step != self.step:
            self.step, self.step_at, self._news = step, now, True

    def report(self) -> ProgressReport:
        return ProgressReport(
            submission_id=self.submission_id, heartbeat_at=self.clock(), started_at=self.started_at, step=self.step,
            step_at=self.step_at, first_step=self.first_step, total_steps=self.total_steps,
            step_time_s=statistics.median(self._times) if self._times else None, output=self.output)

    def tick(self) -> None:
        """Write the progress file if there is news or a heartbeat is due. A report that
        cannot be written is skipped: the run matters more than its report."""
        now = self.clock()
        if self.output is not None and not self._output_said:  # news: the output passed its budget
            self._news, self._output_said = True, True
        due = now - self._written_at >= (PROGRESS_EVERY_S if self._news else HEARTBEAT_S)
        if not due:
            return
        try:
            _write(attempts_dir(self.shared_root) / "progress", f"{self.submission_id}.json",
                   msgspec.json.encode(self.report()))
        except OSError:
            return
        self._written_at, self._news = now, False

    def exited(self, exit_code: int, host_clean: bool = False) -> None:
        """The command exited: say so at once (the reactor watches for it)."""
        try:
            write_exit(self.shared_root, ExitReport(submission_id=self.submission_id, exit_code=exit_code,
                                                    exited_at=self.clock(), step=self.step,
                                                    first_step=self.first_step, total_steps=self.total_steps,
                                                    host_clean=host_clean, output=self.output))
        except OSError:
            pass  # Ray's own report of the job's end still comes
