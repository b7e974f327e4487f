// A tiny fetch wrapper for /api/v2. Auth is the HttpOnly session cookie only: no token is
// ever kept in JS storage or put in a URL.

export const API = "/api/v2";

export class ApiError extends Error {
  constructor(status, detail, extra, body) {
    super(detail || `HTTP ${status}`);
    this.status = status;
    this.detail = detail || `HTTP ${status}`;
    this.extra = extra ?? null;
    this.body = body ?? null;
  }

  /** Field errors [{field, message}] if the server sent any (validation). */
  get fieldErrors() {
    const b = this.body || {};
    const e = this.extra || {};
    const list = b.errors || e.errors || (Array.isArray(e) ? e : null);
    return Array.isArray(list) ? list : [];
  }

  get warnings() {
    const b = this.body || {};
    const e = this.extra || {};
    return Array.isArray(b.warnings) ? b.warnings : Array.isArray(e.warnings) ? e.warnings : [];
  }
}

const unauthorizedHandlers = new Set();

/** fn() is called when any request answers 401 (session expired or logged out). */
export function onUnauthorized(fn) {
  unauthorizedHandlers.add(fn);
  return () => unauthorizedHandlers.delete(fn);
}

/** Encode each path segment, keep the slashes: "a b/c" -> "a%20b/c". */
export function encodePath(path) {
  return String(path).split("/").filter((s) => s !== "").map(encodeURIComponent).join("/");
}

/** "?a=1&b=x" from an object, skipping empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== null && v !== undefined && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

/**
 * request("GET", "/tasks", {json, text, contentType, signal, raw})
 * Returns parsed JSON (or text for text/* answers); throws ApiError on 4xx/5xx.
 */
export async function request(method, path, opts = {}) {
  const headers = { Accept: "application/json, text/plain;q=0.9", "X-Requested-With": "argus-webui" };
  let body;
  if (opts.json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(opts.json);
  } else if (opts.text !== undefined) {
    headers["Content-Type"] = opts.contentType || "text/plain; charset=utf-8";
    body = opts.text;
  }
  let resp;
  try {
    resp = await fetch(API + path, {
      method, headers, body, credentials: "same-origin", signal: opts.signal, cache: "no-store",
    });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, `cannot reach the server (${err.message})`);
  }
  const type = resp.headers.get("Content-Type") || "";
  let payload = null;
  if (resp.status !== 204) {
    const text = await resp.text();
    if (type.includes("json") && text) {
      try { payload = JSON.parse(text); } catch { payload = text; }
    } else {
      payload = text;
    }
  }
  if (!resp.ok) {
    if (resp.status === 401 && !opts.noAuthRedirect) unauthorizedHandlers.forEach((fn) => fn());
    const obj = payload && typeof payload === "object" ? payload : {};
    const detail = obj.detail || (typeof payload === "string" && payload.slice(0, 300)) || resp.statusText;
    throw new ApiError(resp.status, detail, obj.extra, obj);
  }
  return payload;
}

export const get = (path, opts) => request("GET", path, opts);
export const post = (path, json, opts = {}) => request("POST", path, { ...opts, json });
export const del = (path, opts) => request("DELETE", path, opts);

/** Human text for an error, including field errors. */
export function errorText(err) {
  if (!(err instanceof ApiError)) return String(err && err.message ? err.message : err);
  const fields = err.fieldErrors.map((e) => (e.field ? `${e.field}: ${e.message}` : e.message));
  return [err.detail, ...fields.filter((f) => f !== err.detail)].join("\n");
}

/**
 * Upload a File with XMLHttpRequest so that upload progress can be shown.
 * onProgress(loaded, total). Resolves with the parsed answer; rejects with ApiError.
 */
export function upload(path, file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", API + path);
    xhr.withCredentials = true;
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    xhr.setRequestHeader("X-Requested-With", "argus-webui");
    xhr.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) onProgress(e.loaded, e.total);
    });
    xhr.addEventListener("load", () => {
      let obj = null;
      try { obj = JSON.parse(xhr.responseText); } catch { obj = null; }
      if (xhr.status >= 200 && xhr.status < 300) {
        onProgress(file.size, file.size);
        resolve(obj);
      } else {
        if (xhr.status === 401) unauthorizedHandlers.forEach((fn) => fn());
        const detail = (obj && obj.detail) || xhr.statusText || `HTTP ${xhr.status}`;
        reject(new ApiError(xhr.status, detail, obj && obj.extra, obj));
      }
    });
    xhr.addEventListener("error", () => reject(new ApiError(0, "upload failed: network error")));
    xhr.addEventListener("abort", () => reject(new ApiError(0, "upload canceled")));
    xhr.send(file);
  });
}
