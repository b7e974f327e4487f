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

const TUS_CHUNK = 16 * 1024 * 1024;
const b64 = (text) => btoa(String.fromCharCode(...new TextEncoder().encode(text)));

function tusRequest(method, url, headers, body, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open(method, url);
    xhr.withCredentials = true;
    xhr.setRequestHeader("Tus-Resumable", "1.0.0");
    xhr.setRequestHeader("X-Requested-With", "argus-webui");
    for (const [k, v] of Object.entries(headers)) xhr.setRequestHeader(k, v);
    if (onProgress) xhr.upload.addEventListener("progress", (e) => onProgress(e.loaded));
    xhr.addEventListener("load", () => {
      if (xhr.status < 400) { resolve(xhr); return; }
      let obj = null;
      try { obj = JSON.parse(xhr.responseText); } catch { obj = null; }
      if (xhr.status === 401) unauthorizedHandlers.forEach((fn) => fn());
      reject(new ApiError(xhr.status, (obj && obj.detail) || xhr.statusText || `HTTP ${xhr.status}`, obj && obj.extra, obj));
    });
    xhr.addEventListener("error", () => reject(new ApiError(0, "network error")));
    xhr.addEventListener("abort", () => reject(new ApiError(0, "upload canceled")));
    xhr.send(body);
  });
}

/**
 * Upload a File resumably (tus 1.0.0, docs/api.md): created first (a file that cannot fit
 * is refused before a byte is sent), then sent in 16 MiB chunks, each with its SHA-256
 * when the page may hash (a secure context). A lost connection is retried from the offset
 * the server reports. `dest` is area/path. onProgress(loaded, total).
 */
export async function tusUpload(dest, file, onProgress) {
  const created = await tusRequest("POST", `${API}/uploads`, {
    "Upload-Length": String(file.size), "Upload-Metadata": `path ${b64(dest)}`,
  }, null);
  const url = created.getResponseHeader("Location");
  let offset = 0;
  let failures = 0;
  while (offset < file.size || file.size === 0) {
    if (file.size === 0) break;
    const chunk = file.slice(offset, offset + TUS_CHUNK);
    const headers = { "Upload-Offset": String(offset), "Content-Type": "application/offset+octet-stream" };
    if (globalThis.crypto && crypto.subtle) {
      const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", await chunk.arrayBuffer()));
      headers["Upload-Checksum"] = `sha256 ${btoa(String.fromCharCode(...digest))}`;
    }
    try {
      const xhr = await tusRequest("PATCH", url, headers, chunk, (n) => onProgress(offset + n, file.size));
      offset = Number(xhr.getResponseHeader("Upload-Offset"));
      failures = 0;
    } catch (err) {
      if (err.status && err.status !== 409 && err.status !== 460) throw err;
      if (++failures > 5) throw err;
      await new Promise((r) => setTimeout(r, 500 * 2 ** failures));
      const head = await tusRequest("HEAD", url, {}, null);
      offset = Number(head.getResponseHeader("Upload-Offset"));
    }
    onProgress(offset, file.size);
  }
  onProgress(file.size, file.size);
}
