// Task detail: state, why it waits, progress chart, attempts, goodput, outputs, live log,
// timeline, spec.

import { get, post, query, errorText, encodePath } from "../api.js";
import { API } from "../api.js";
import { onEvent, taskIdOf } from "../events.js";
import {
  h, replace, append, timeEl, stateBadge, fmtDemand, dl, notice, debounce, pretty, TERMINAL, WAITING, startsIn,
} from "../dom.js";
import { lineChart, mainMetric } from "../chart.js";
import { renderNotFound } from "./not_found.js";
import { CANCELABLE, TASK_EVENT_TYPES, UNEXAMINED } from "../vocabulary.js";
import { outputsPanel } from "./task_outputs.js";
import { goodputBreakdown } from "../goodput.js";

const LOG_TAIL = 300;
const MAX_LOG_CHARS = 400_000;
// Terminal colour codes (Ray prefixes worker lines with them): shown as text they are noise.
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]/g;

export async function render(main, params, ctx) {
  const id = params.id;
  ctx.setTitle(id);
  const base = `/tasks/${encodePath(id)}`;
  let task;
  try {
    task = await get(base);
  } catch (err) {
    if (err.status === 404 || err.status === 403) {
      renderNotFound(main, `There is no task “${id}” that you can see.`);
      return undefined;
    }
    replace(main, h("h1", {}, id), notice("error", errorText(err)));
    return undefined;
  }

  // --- layout -----------------------------------------------------------------------
  const stateSlot = h("span", { id: "task-state" });
  const cancelBtn = h("button", { type: "button", class: "btn btn-danger", id: "cancel-task" }, "Cancel task…");
  const summary = h("div");
  const waiting = h("section", { id: "waiting", "aria-labelledby": "waiting-h", hidden: true });
  const progress = h("section", { id: "progress", class: "card", "aria-labelledby": "progress-h" },
    h("h2", { id: "progress-h" }, "Training progress"));
  const progressBody = h("div", { "aria-live": "polite" });
  progress.append(progressBody);
  const attempts = h("section", { id: "attempts", "aria-labelledby": "attempts-h" },
    h("h2", { id: "attempts-h" }, "Attempts"));
  const attemptsBody = h("div");
  const stacksBody = h("div", { id: "stacks" });
  attempts.append(attemptsBody, stacksBody);
  // The GPU time it held and where it went (docs/runs.md, "Goodput"), as of the last read.
  const goodput = h("section", { id: "goodput", class: "card", "aria-labelledby": "goodput-h" },
    h("h2", { id: "goodput-h" }, "Goodput"));
  const goodputBody = h("div");
  goodput.append(goodputBody);
  const outputs = outputsPanel(ctx);
  const logSection = h("section", { id: "logs", class: "card", "aria-labelledby": "logs-h" });
  const timeline = h("section", { id: "timeline", "aria-labelledby": "timeline-h" },
    h("h2", { id: "timeline-h" }, "Timeline"));
  const timelineBody = h("tbody");
  timeline.append(h("div", { class: "table-wrap" }, h("table", { class: "data timeline" },
    h("caption", { class: "visually-hidden" }, "Every event of this task, oldest first"),
    h("thead", {}, h("tr", {},
      h("th", { scope: "col" }, "#"), h("th", { scope: "col" }, "Time"),
      h("th", { scope: "col" }, "Event"), h("th", { scope: "col" }, "By"),
      h("th", { scope: "col" }, "What changed"))),
    timelineBody)));
  const specSection = h("section", { id: "spec", "aria-labelledby": "spec-h" },
    h("h2", { id: "spec-h" }, "Spec"));
  const flash = h("div", { role: "status", "aria-live": "polite" });
  const dialog = cancelDialog(id, async () => {
    try {
      await post(`${base}/cancel`, {});
      replace(flash, notice("ok", "Cancel requested."));
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
    }
    refresh();
  });
  cancelBtn.addEventListener("click", () => dialog.showModal());

  replace(main,
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/tasks" }, "Tasks"), " / "),
    h("div", { class: "page-head" },
      h("h1", { class: "mono task-title" }, id), stateSlot, h("span", { class: "spacer" }), cancelBtn),
    flash,
    h("div", { class: "grid-2" }, h("section", { class: "card", "aria-label": "Summary" }, summary), progress),
    waiting, attempts, goodput, outputs.section, logSection, timeline, specSection, dialog);

  // --- summary, waiting, attempts -----------------------------------------------------
  function drawTask(t) {
    task = t;
    replace(stateSlot, stateBadge(t.state));
    cancelBtn.hidden = !CANCELABLE.has(t.state);
    const warn = Array.isArray(t.warnings) && t.warnings.length
      ? h("ul", { class: "warnings" }, t.warnings.map((w) => h("li", {}, w))) : null;
    replace(summary, dl([
      ["User", t.user],
      ["Workload", [t.workload, t.kind ? ` (${t.kind})` : ""]],
      ["Demand", fmtDemand(t.demand, t.driver_cpus || 0)],
      ["Priority", t.priority !== undefined ? String(t.priority) : ""],
      ["Attempts", t.attempts ? `${t.attempts.length} of at most ${t.max_attempts ?? "?"}` : ""],
      ["Submitted", timeEl(t.created_at ?? t.submitted_at)],
      ["Updated", timeEl(t.updated_at)],
      ["Failure", t.failure_kind ? h("span", { class: "failure" }, t.failure_kind) : ""],
      ["Error", t.error_summary ? h("pre", { class: "evidence" }, t.error_summary) : ""],
      ["Warnings", warn],
    ]));
    const isWaiting = WAITING.has(t.state);
    waiting.hidden = !isWaiting;
    if (isWaiting) {
      replace(waiting, h("div", { class: "notice notice-info" },
        h("h2", { id: "waiting-h" }, "Why is it waiting?"),
        dl([
          ["Queue position", t.queue_position !== null && t.queue_position !== undefined ? String(t.queue_position) : ""],
          ["Expected start", timeEl(t.expected_start)],
          ["Starts (80 % sure)", t.start_earliest ? startsIn(t, Date.now() / 1000) : ""],
          ["At the latest", t.start_at_latest ? timeEl(t.start_at_latest) : ""],
          ["Reason", t.wait_reason || (UNEXAMINED.has(t.state) ? "not looked at by the scheduler yet" : "")],
          ["Details", t.wait_message],
          ["Next try", t.next_run_at && t.next_run_at * 1000 > Date.now() ? timeEl(t.next_run_at) : ""],
        ]),
        h("p", {}, h("a", { href: "#/queue" }, "See the whole queue"))));
    }
    drawAttempts(t.attempts || []);
    drawStacks(t.attempts || []);
    replace(goodputBody, goodputBreakdown(t.goodput));
    outputs.draw(t).catch((err) => console.error(err));
    drawLogPicker(t.attempts || []);
  }

  function drawAttempts(list) {
    if (list.length === 0) {
      replace(attemptsBody, h("p", { class: "muted" }, "No attempt yet: the task has not been handed to Ray."));
      return;
    }
    replace(attemptsBody, h("div", { class: "table-wrap" }, h("table", { class: "data", id: "attempts-table" },
      h("thead", {}, h("tr", {},
        ["#", "Submission id", "Ray status", "Decided", "Started", "Ended", "Checkpoint", "Exit", "Failure", "Evidence"]
          .map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, list.map((a) => h("tr", {},
        h("td", { class: "num" }, String(a.attempt_no)),
        h("td", { class: "mono" }, a.submission_id, a.recovered ? h("span", { class: "tag" }, "recovered") : null),
        h("td", {}, a.ray_status || a.status || ""),
        h("td", {}, timeEl(a.decided_at ?? a.submitted_at)),
        h("td", {}, timeEl(a.started_at)),
        h("td", {}, timeEl(a.ended_at)),
        // The last checkpoint the reactor saw (what a preemption or a retry resumes from).
        h("td", {}, a.checkpoint_step != null ? [`step ${a.checkpoint_step}, `, timeEl(a.checkpointed_at)] : ""),
        h("td", { class: "num" }, a.exit_code ?? ""),
        h("td", {}, a.failure_kind ? h("span", { class: "failure" }, a.failure_kind) : ""),
        h("td", {}, a.evidence ? h("pre", { class: "evidence" }, a.evidence) : "")))))));
  }

  // A stalled attempt's stacks, dumped before the watchdog stopped it: loaded when opened.
  function drawStacks(list) {
    const stalled = list.filter((a) => a.stacks_at != null);
    const have = [...stacksBody.querySelectorAll("details")].map((d) => d.dataset.attempt);
    if (have.join() === stalled.map((a) => String(a.attempt_no)).join()) return;
    replace(stacksBody, stalled.map((a) => {
      const pre = h("pre", { class: "log stacks" }, "Loading…");
      const box = h("details", { "data-attempt": String(a.attempt_no) },
        h("summary", {}, `Attempt ${a.attempt_no} stalled: Python stacks of ${a.stacks_processes || 0} process(es)`), pre);
      box.addEventListener("toggle", async () => {
        if (!box.open || pre.dataset.loaded) return;
        try {
          replace(pre, await get(`${base}/stacks${query({ attempt: a.attempt_no })}`));
          pre.dataset.loaded = "1";
        } catch (err) {
          replace(pre, errorText(err));
        }
      });
      return box;
    }));
  }

  // --- progress -----------------------------------------------------------------------
  let metric = null;
  let lastProgress = null;
  async function loadProgress() {
    try {
      lastProgress = await get(`${base}/progress`);
    } catch (err) {
      if (err.status === 404) lastProgress = { points: [] };
      else { replace(progressBody, notice("error", errorText(err))); return; }
    }
    drawProgress();
  }
  function drawProgress() {
    const p = lastProgress || { points: [] };
    const points = p.points || [];
    const names = [...new Set(points.flatMap((pt) => Object.keys(pt.metrics || {})))].sort();
    if (!metric || !names.includes(metric)) metric = mainMetric(names);
    const done = p.last_step ?? (points.length ? points[points.length - 1].step : null);
    const total = p.total_steps ?? null;
    const select = names.length > 1 ? h("select", { id: "metric", onchange: (e) => { metric = e.target.value; drawProgress(); } },
      names.map((n) => h("option", { value: n, selected: n === metric }, n))) : null;
    replace(progressBody,
      h("p", { class: "steps", id: "steps" },
        done === null ? "No steps reported yet." : `Step ${done}${total ? ` of ${total}` : ""}`),
      total ? h("progress", { max: total, value: Math.min(done || 0, total), "aria-label": "Steps done" }) : null,
      select ? h("div", { class: "field-inline" }, h("label", { for: "metric" }, "Metric"), select) : null,
      metric ? lineChart(points.filter((pt) => pt.metrics && metric in pt.metrics)
        .map((pt) => ({ x: Number(pt.step), y: Number(pt.metrics[metric]) })), { label: metric })
        : h("p", { class: "muted" }, "The chart appears once the trainer logs metrics."));
  }

  // --- logs ---------------------------------------------------------------------------
  const logPre = h("pre", { class: "log", id: "log", tabindex: "0", "aria-label": "Driver log" });
  const logStatus = h("span", { class: "muted", role: "status" });
  const attemptSelect = h("select", { id: "log-attempt" });
  attemptSelect.addEventListener("change", () => openLog());
  append(logSection,
    h("div", { class: "section-head" }, h("h2", { id: "logs-h" }, "Log"),
      h("div", { class: "field-inline" }, h("label", { for: "log-attempt" }, "Attempt"), attemptSelect),
      logStatus),
    logPre);
  let logSource = null;
  let logAttempt = null;
  let logPoll = null;

  function drawLogPicker(list) {
    const have = [...attemptSelect.options].map((o) => o.value);
    const want = list.map((a) => String(a.attempt_no));
    logPre.hidden = list.length === 0;
    attemptSelect.parentElement.hidden = list.length === 0;
    if (list.length === 0) logStatus.textContent = "No log yet: the task has not started.";
    if (have.join() === want.join()) return;
    const followLatest = !attemptSelect.value || attemptSelect.value === have[have.length - 1];
    replace(attemptSelect, list.map((a) => h("option", { value: a.attempt_no }, `#${a.attempt_no}`)));
    if (followLatest && want.length) attemptSelect.value = want[want.length - 1];
    attemptSelect.disabled = list.length < 2;
    if (attemptSelect.value !== logAttempt) openLog();
  }

  function setLog(text) {
    const atBottom = logPre.scrollHeight - logPre.scrollTop - logPre.clientHeight < 40;
    const clean = text.replace(ANSI, "");
    logPre.textContent = clean.length > MAX_LOG_CHARS ? clean.slice(-MAX_LOG_CHARS) : clean;
    if (atBottom) logPre.scrollTop = logPre.scrollHeight;
  }

  function closeLog() {
    if (logSource) { logSource.close(); logSource = null; }
    clearInterval(logPoll); logPoll = null;
  }

  async function fetchLogTail() {
    const attempt = attemptSelect.value;
    try {
      const text = await get(`${base}/logs${query({ tail: LOG_TAIL, attempt })}`);
      if (attempt !== attemptSelect.value) return;
      setLog(typeof text === "string" ? text : pretty(text));
      if (!text) logStatus.textContent = "The log is empty so far.";
    } catch (err) {
      if (err.status === 404) { logStatus.textContent = "No log yet."; return; }
      logStatus.textContent = errorText(err);
    }
  }

  function openLog() {
    closeLog();
    logAttempt = attemptSelect.value;
    if (!logAttempt) {
      logPre.textContent = "";
      logStatus.textContent = "No log yet: the task has not started.";
      return;
    }
    const latest = attemptSelect.value === attemptSelect.options[attemptSelect.options.length - 1].value;
    const live = latest && !TERMINAL.has(task.state);
    if (!live) { logStatus.textContent = ""; fetchLogTail(); return; }
    // Follow the log as it is written (SSE 'log' messages). The server sends the tail first,
    // so a reconnect starts over from a fresh tail.
    let text = "";
    let opened = false;
    logStatus.textContent = "following…";
    logSource = new EventSource(`${API}${base}/logs${query({ follow: 1, tail: LOG_TAIL, attempt: logAttempt })}`, { withCredentials: true });
    logSource.addEventListener("open", () => { opened = true; text = ""; logStatus.textContent = "● following"; });
    const onChunk = (msg) => {
      let chunk = msg.data;
      try {
        const obj = JSON.parse(chunk);
        if (typeof obj === "string") chunk = obj;
        else if (obj && typeof obj === "object") chunk = obj.line ?? obj.text ?? obj.data ?? chunk;
      } catch { /* plain text */ }
      text += chunk.endsWith("\n") ? chunk : `${chunk}\n`;
      if (text.length > MAX_LOG_CHARS * 1.5) text = text.slice(-MAX_LOG_CHARS);
      setLog(text);
    };
    logSource.addEventListener("log", onChunk);
    logSource.addEventListener("message", onChunk);
    logSource.addEventListener("end", () => { closeLog(); logStatus.textContent = "log ended"; });
    logSource.addEventListener("error", () => {
      if (!opened || (logSource && logSource.readyState === EventSource.CLOSED)) {
        // No streaming available: fall back to polling the tail.
        closeLog();
        logStatus.textContent = "refreshing every 2 s";
        fetchLogTail();
        logPoll = setInterval(fetchLogTail, 2000);
      }
    });
  }

  // --- timeline -----------------------------------------------------------------------
  let lastPosition = 0;
  function addTimelineRow(e) {
    if (e.position !== undefined && e.position <= lastPosition) return;
    if (e.position !== undefined) lastPosition = e.position;
    const after = e.state_after || e.state;
    timelineBody.append(h("tr", { "data-type": e.type },
      h("td", { class: "num" }, e.position ?? ""),
      h("td", {}, timeEl(e.recorded_at)),
      h("td", {}, h("span", { class: "event-type" }, e.type), after ? [" → ", stateBadge(after)] : null),
      h("td", {}, e.actor || ""),
      h("td", {}, h("span", Object.hasOwn(DESCRIBE, e.type) ? {} : { class: "undescribed" },
        describe(e.type, e.data || {})),
        h("details", { class: "raw" }, h("summary", {}, "data"), h("pre", {}, pretty(e.data))))));
  }
  async function loadTimeline() {
    try {
      const list = await get(`${base}/timeline`);
      (Array.isArray(list) ? list : list.items || []).forEach(addTimelineRow);
    } catch (err) {
      timeline.append(notice("error", errorText(err)));
    }
  }

  // --- spec ---------------------------------------------------------------------------
  async function loadSpec() {
    try {
      const s = await get(`${base}/spec`);
      const warnings = Array.isArray(s.warnings) && s.warnings.length
        ? notice("warning", h("strong", {}, "Warnings kept with this task:"), h("ul", {}, s.warnings.map((w) => h("li", {}, w)))) : null;
      append(specSection, warnings, h("div", { class: "grid-2" },
        h("div", {}, h("h3", {}, "As submitted"), h("pre", { class: "code", id: "spec-raw", tabindex: "0" }, s.spec_raw || "")),
        h("div", {}, h("h3", {}, "Expanded (what runs)"),
          h("pre", { class: "code", id: "spec-command", tabindex: "0" }, s.command || ""),
          h("details", {}, h("summary", {}, "Parsed spec with defaults"), h("pre", { class: "code" }, pretty(s.spec))),
          s.command_raw && s.command_raw !== s.command
            ? h("details", {}, h("summary", {}, "Command before $HOME expansion"), h("pre", { class: "code" }, s.command_raw)) : null)));
    } catch (err) {
      specSection.append(notice("error", errorText(err)));
    }
  }

  // --- live updates -------------------------------------------------------------------
  async function refresh() {
    try {
      drawTask(await get(base));
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
      return;
    }
    if (TERMINAL.has(task.state) && (logSource || logPoll)) openLog(); // final tail
    loadProgress();
  }
  const refreshSoon = debounce(refresh, 150);
  const off = onEvent((rec) => {
    if (taskIdOf(rec) !== id) return;
    addTimelineRow(rec);
    refreshSoon();
  });
  // Metrics come from the log, not from events: poll them while the task is active.
  const progressTimer = setInterval(() => { if (!TERMINAL.has(task.state)) loadProgress(); }, 5000);

  drawTask(task);
  await Promise.all([loadTimeline(), loadProgress(), loadSpec()]);
  return () => { off(); closeLog(); clearInterval(progressTimer); };
}

function cancelDialog(id, onConfirm) {
  const dialog = h("dialog", { id: "cancel-dialog", "aria-labelledby": "cancel-h" });
  const form = h("form", { method: "dialog" },
    h("h2", { id: "cancel-h" }, "Cancel this task?"),
    h("p", {}, "Task ", h("code", {}, id), " will be stopped. A running Ray job is stopped too; this cannot be undone."),
    h("div", { class: "actions" },
      h("button", { value: "keep", class: "btn", autofocus: true }, "Keep it"),
      h("button", { value: "cancel", class: "btn btn-danger", id: "confirm-cancel" }, "Cancel task")));
  dialog.append(form);
  dialog.addEventListener("close", () => { if (dialog.returnValue === "cancel") onConfirm(); });
  return dialog;
}

/** What each task event changed, in one line, by type: one entry per task event type the
 * server has (GET /vocabulary). tests/api/test_vocabulary.py reads these keys, and the
 * browser asks undescribed(): a type the server adds fails them until it is described here. */
export const DESCRIBE = {
  TaskSubmitted: (d) => `submitted ${d.workload || ""} (${d.kind || "basic"})` +
    `${d.demand ? ` needing ${fmtDemand(d.demand)}` : ""} by ${d.user || "?"}`,
  TaskDeferred: (d) => `waits: ${d.reason || ""}${d.message ? ` — ${d.message}` : ""}`,
  AttemptStarting: (d) => `attempt ${d.attempt_no} about to be submitted as ${d.submission_id}` +
    `${d.note ? ` (${d.note})` : ""}`,
  AttemptSubmitted: (d) => `Ray accepted ${d.submission_id}${d.recovered ? " (found after a restart)" : ""}`,
  AttemptRunning: (d) => `attempt ${d.attempt_no} is running`,
  AttemptPlacementTimedOut: (d) => `attempt ${d.attempt_no}: placement group(s) ` +
    `${(d.placement_groups || []).join(", ")} pending for ${Math.round(d.pending_s)} s: its Ray job is stopped, to retry`,
  AttemptStalled: (d) => `attempt ${d.attempt_no} stalled: no new step for ${Math.round(d.reached_at - d.since)} s ` +
    `${d.step !== null && d.step !== undefined ? `after step ${d.step}` : "before its first step"} (bound ` +
    `${Math.round(d.bound_s)} s: ${d.why}): its Ray job is stopped, to resume`,
  AttemptStacksCaptured: (d) => (d.processes || []).length === 0 ? `attempt ${d.attempt_no}: no stacks (${d.note})` :
    `attempt ${d.attempt_no}: Python stacks of ${d.processes.length} process(es) on ${d.hostname} saved ` +
    `(${d.processes.slice(0, 2).map((p) => `pid ${p.pid}: ${p.top_frame}`).join("; ")})`,
  AttemptOutputTruncated: (d) => `attempt ${d.attempt_no} printed ${d.total_bytes} bytes, past its budget of ` +
    `${d.budget_bytes}: the first and last ${d.kept_bytes} kept, ${d.dropped_bytes} dropped` + (d.final ? "" : " so far"),
  AttemptOutputsRemoved: (d) => `${d.bytes} bytes (${d.entries} entries) of ` +
    `${d.attempt_no ? `attempt ${d.attempt_no}` : "its outputs"} deleted by ${d.by} (${d.rule}` +
    `${d.reason ? `: ${d.reason}` : ""})` + (d.complete ? "" : ", partly"),
  AttemptInterrupted: (d) => `attempt ${d.attempt_no} interrupted by ${d.by}: ${d.reason}; it resumes first when Argus is back`,
  AttemptPreempted: (d) => `attempt ${d.attempt_no} preempted (${d.reason}) for ${d.by_task_id}: ${d.message}`,
  AttemptProgressed: (d) => d.step === null || d.step === undefined ? `attempt ${d.attempt_no} will train ${d.total_steps} steps` :
    `attempt ${d.attempt_no} at step ${d.step}` +
    `${d.total_steps ? ` of ${d.total_steps}` : ""}${d.step_time_s ? `, ${d.step_time_s.toFixed(1)} s a step` : ""}`,
  CheckpointObserved: (d) => `attempt ${d.attempt_no} saved a checkpoint: step ${d.step} in ${d.folder}`,
  AttemptTimeLimitReached: (d) => `attempt ${d.attempt_no} reached its time limit of ${d.time_limit_s} s` +
    ` after ${Math.round(d.ran_s)} s: its Ray job is stopped`,
  AttemptEnded: (d) => `attempt ${d.attempt_no} ended: ${d.ray_status}` +
    `${d.exit_code !== null && d.exit_code !== undefined ? `, exit ${d.exit_code}` : ""}` +
    `${d.failure_kind ? `, ${d.failure_kind}` : ""}${d.evidence ? ` — ${d.evidence}` : ""}`,
  RetryScheduled: (d) => `retry after ${d.delay_s}s (attempt ${d.failed_attempt_no} failed: ${d.failure_kind})`,
  TaskSucceeded: (d) => `succeeded (attempt ${d.attempt_no})`,
  TaskIncomplete: (d) => `incomplete after attempt ${d.attempt_no}: ${d.reason}`,
  TaskFailed: (d) => `failed: ${d.failure_kind}${d.error_summary ? ` — ${d.error_summary}` : ""}`,
  TaskCancelRequested: (d) => `cancel requested by ${d.by}`,
  TaskCanceled: (d) => `canceled by ${d.by}${d.ray_status ? ` (Ray: ${d.ray_status})` : ""}`,
};

/** One line saying what an event changed; a type this UI does not know says so. */
export function describe(type, d) {
  if (Object.hasOwn(DESCRIBE, type)) return DESCRIBE[type](d);
  return `${type}: not described by this version of the web UI (see its data)`;
}

/** The server's task event types that DESCRIBE lacks (none, when the UI is up to date). */
export function undescribed() {
  return [...TASK_EVENT_TYPES].filter((type) => !Object.hasOwn(DESCRIBE, type));
}
