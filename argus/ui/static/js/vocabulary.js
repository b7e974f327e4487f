// The server's words (GET /api/v2/vocabulary): task states and which are terminal,
// waiting or cancelable, and every event type. Loaded once, before any page renders, into the arrays
// and sets below, which the pages import: the UI keeps no copy of its own that could
// drift from the server's enums.

import { get } from "./api.js";

export const STATES = [];
export const TERMINAL = new Set();
export const WAITING = new Set();
export const UNEXAMINED = new Set(); // waiting, not yet deferred by the scheduler: no reason yet
export const CANCELABLE = new Set(); // a cancel request would move it: offer Cancel
export const EVENT_TYPES = [];
export const TASK_EVENT_TYPES = new Set();

let loaded = null;

/** Fill the exports from the server (once; later calls share the first). */
export function loadVocabulary() {
  if (!loaded) {
    loaded = get("/vocabulary", { noAuthRedirect: true }).then((v) => {
      for (const s of v.states) {
        STATES.push(s.name);
        if (s.terminal) TERMINAL.add(s.name);
        if (s.waiting) WAITING.add(s.name);
        if (s.unexamined) UNEXAMINED.add(s.name);
        if (s.cancelable) CANCELABLE.add(s.name);
      }
      for (const e of v.event_types) {
        EVENT_TYPES.push(e.name);
        if (e.about_a_task) TASK_EVENT_TYPES.add(e.name);
      }
    });
  }
  return loaded;
}
