// The live event stream (Server-sent events on /api/v2/events, cookie auth).
// One EventSource per page load, shared by all pages. The browser resends Last-Event-ID
// (= log position) when it reconnects; if we have to open a new EventSource (after a
// login), we resume with ?after=<last position seen>.

import { API, get } from "./api.js";
// Every event type the server has (learned at start): the server names each SSE message
// by its type, and EventSource only delivers named messages to listeners of that name.
import { EVENT_TYPES } from "./vocabulary.js";

export { EVENT_TYPES };

let source = null;
let lastId = null;
let status = "off"; // off | connecting | live | reconnecting
const listeners = new Set();
const statusListeners = new Set();

function setStatus(s) {
  status = s;
  statusListeners.forEach((fn) => fn(s));
}

function deliver(msg) {
  if (msg.lastEventId) lastId = msg.lastEventId;
  let rec;
  try { rec = JSON.parse(msg.data); } catch { return; }
  if (!rec || typeof rec !== "object") return;
  if (!rec.type && msg.type && msg.type !== "message") rec.type = msg.type;
  listeners.forEach((fn) => {
    try { fn(rec); } catch (err) { console.error("event listener failed", err); }
  });
}

/** Open the stream (idempotent). `after`: position to start after, if nothing seen yet. */
export function startEvents(after) {
  if (source) return;
  const from = lastId ?? after;
  const url = `${API}/events${from !== null && from !== undefined ? `?after=${encodeURIComponent(from)}` : ""}`;
  setStatus("connecting");
  source = new EventSource(url, { withCredentials: true });
  source.addEventListener("open", () => setStatus("live"));
  source.addEventListener("error", () => {
    // CONNECTING: the browser retries by itself (with Last-Event-ID). CLOSED: it gave up
    // (e.g. 401): open a fresh one later, resuming after lastId.
    if (source && source.readyState === EventSource.CLOSED) {
      source = null;
      setStatus("reconnecting");
      // EventSource does not say why; a 401 here means the session ended, and asking
      // /me lets the shell notice it (api.js calls the onUnauthorized handlers).
      get("/me").catch(() => {});
      setTimeout(() => { if (status === "reconnecting") startEvents(); }, 3000);
    } else {
      setStatus("reconnecting");
    }
  });
  source.addEventListener("message", deliver);
  for (const type of EVENT_TYPES) source.addEventListener(type, deliver);
}

export function stopEvents() {
  if (source) source.close();
  source = null;
  setStatus("off");
}

/** fn(record) for every event; record = {position, stream, type, recorded_at, actor, data}. */
export function onEvent(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** fn(status) now and on every change. */
export function onStatus(fn) {
  statusListeners.add(fn);
  fn(status);
  return () => statusListeners.delete(fn);
}

/** The task id an event is about, or null. */
export function taskIdOf(rec) {
  if (rec.data && typeof rec.data.task_id === "string") return rec.data.task_id;
  if (typeof rec.stream === "string" && rec.stream.startsWith("task-")) return rec.stream.slice(5);
  return null;
}
