// The HTTP API: JSON calls and SSE runs, with the bearer token on every request.

import { readEvents } from "./sse.js";

export class ApiError extends Error {
  /** status 0 means the server could not be reached. */
  constructor(status, code, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
  }
}

// Reconnecting a dropped stream: wait 0.5 s, 1 s, 2 s, 4 s, then every 5 s; give up a minute
// after the drop. A stream silent for STALL_MS (the server sends a heartbeat every 15 s) is
// taken for dropped.
export const BACKOFF_MS = [500, 1000, 2000, 4000, 5000];
const GIVE_UP_MS = 60_000;
export const STALL_MS = 45_000;

const UNREACHABLE = "Could not reach the server. Check your connection and retry.";
export const FALLBACK = "Something went wrong; please retry.";

/** Text safe to show a user: an ApiError's message, never a raw JavaScript error. */
export function userMessage(error, fallback = FALLBACK) {
  return error instanceof ApiError && error.message ? error.message : fallback;
}

async function jsonOf(response) {
  try {
    return await response.json();
  } catch (error) {
    if (error?.name === "AbortError") throw error;
    throw new ApiError(response.status, "bad_response", "The server sent an unexpected answer.");
  }
}

async function errorFrom(response) {
  let code = `http_${response.status}`;
  let message = `The server answered ${response.status}.`;
  let body = null;
  try {
    body = await response.json();
    if (body && body.error) {
      code = String(body.error.code || code);
      message = String(body.error.message || message);
    }
  } catch {
    /* not JSON: keep the generic message */
  }
  const error = new ApiError(response.status, code, message);
  error.body = body;
  return error;
}

/** Worth another try later: no answer, or the server (or a proxy) failing for now. */
function retryable(error) {
  if (!(error instanceof ApiError)) return false;
  return error.status === 0 || error.status === 408 || error.status === 429 || error.status >= 500;
}

export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** An abort signal that fires when `outer` does, or when poke() has not been called for ms. */
export class StallWatch {
  constructor(outer, ms) {
    this.controller = new AbortController();
    this.ms = ms;
    this.outer = outer;
    this.onAbort = () => this.controller.abort(outer.reason);
    outer?.addEventListener("abort", this.onAbort, { once: true });
    this.timer = null;
    this.poke();
  }

  get signal() {
    return this.controller.signal;
  }

  poke() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.controller.abort(new DOMException("stalled", "TimeoutError")), this.ms);
  }

  stop() {
    clearTimeout(this.timer);
    this.outer?.removeEventListener("abort", this.onAbort);
  }
}

export class Api {
  constructor({ token = null, onUnauthorized = () => {} } = {}) {
    this.token = token;
    this.onUnauthorized = onUnauthorized;
  }

  headers(extra = {}) {
    const headers = { ...extra };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    return headers;
  }

  async fetch(path, init) {
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      if (error?.name === "AbortError") throw error;
      throw new ApiError(0, "network_error", UNREACHABLE);
    }
    if (!response.ok) {
      const error = await errorFrom(response);
      if (response.status === 401 && this.token) this.onUnauthorized(error);
      throw error;
    }
    return response;
  }

  async request(method, path, body) {
    const init = { method, headers: this.headers({ Accept: "application/json" }) };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await this.fetch(path, init);
    if (response.status === 204) return null;
    return jsonOf(response);
  }

  get(path) {
    return this.request("GET", path);
  }

  post(path, body) {
    return this.request("POST", path, body);
  }

  /** Open an SSE response (HTTP errors and an unreachable server throw ApiError). */
  openStream(method, path, { body, headers = {}, signal } = {}) {
    const init = { method, headers: this.headers({ Accept: "text/event-stream", ...headers }), signal };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return this.fetch(path, init);
  }

  /**
   * Follow one run as SSE, reconnecting by itself. Yields {type, data, id} with `data` parsed
   * from JSON, ending after `done`; in between, {type: "reconnecting"} when the connection
   * drops (a body that ends without `done`, a network error while reading, or nothing at all,
   * not even a heartbeat, for STALL_MS) and {type: "reconnected"} once events flow again.
   * A reconnection GETs the run's `/stream` with `Last-Event-ID`, so nothing is repeated or
   * lost. The iteration ends without `done` when it gives up (GIVE_UP_MS after the drop, or
   * at once when the run cannot be followed); an HTTP error on opening throws ApiError.
   *
   * `cursor` ({location, lastId}) is kept up to date: the run's path (from Content-Location,
   * or the `run` event) and the id of the last event read. It may start with a known run.
   */
  async *follow(open, { signal, cursor = { location: null, lastId: 0 } } = {}) {
    const reopen = () =>
      this.openStream("GET", `${cursor.location}/stream`, {
        headers: { "Last-Event-ID": String(cursor.lastId) },
        signal,
      });
    let dropped = null; // when the connection was lost, until events flow again
    let attempt = 0;
    for (;;) {
      let response = null;
      try {
        response = await (dropped === null ? open() : reopen());
      } catch (error) {
        if (dropped === null || (error instanceof ApiError && error.status === 401)) throw error;
        if (!retryable(error)) return; // say, the run is not found: give up
      }
      if (response !== null) {
        const location = response.headers.get("Content-Location");
        if (location && location.startsWith("/threads/")) cursor.location = location;
        if (dropped !== null) yield { type: "reconnected", data: null, id: "" };
        let flowing = false;
        const watch = new StallWatch(signal, STALL_MS);
        const onComment = () => {
          flowing = true;
          watch.poke();
        };
        try {
          for await (const event of readEvents(response, { signal: watch.signal, onComment })) {
            onComment();
            const id = Number.parseInt(event.id, 10);
            if (Number.isFinite(id)) {
              if (id <= cursor.lastId) continue; // seen already
              cursor.lastId = id;
            }
            let data = null;
            try {
              data = event.data ? JSON.parse(event.data) : null;
            } catch {
              data = { text: event.data };
            }
            if (event.type === "run" && data?.run_id && data.thread_id && !cursor.location) {
              cursor.location = Api.runLocation(data.thread_id, data.run_id);
            }
            yield { type: event.type, data, id: event.id };
            if (event.type === "done") return;
          }
        } catch (error) {
          if (signal?.aborted) throw error;
          // The connection broke (or stalled) mid-stream: reconnect below.
        } finally {
          watch.stop();
        }
        if (!cursor.location) return; // no run to come back to: the caller sees no `done`
        if (flowing) {
          dropped = null;
          attempt = 0;
        }
        dropped ??= Date.now();
        yield { type: "reconnecting", data: null, id: "" };
      }
      if (Date.now() - dropped >= GIVE_UP_MS) return;
      await sleep(BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)], signal);
      attempt += 1;
    }
  }

  // --- endpoints ---------------------------------------------------------------------------

  ready() {
    return this.get("/readyz").catch((error) => {
      // Not ready (say, the database is down) still names the model.
      if (error instanceof ApiError && error.status === 503) return error.body;
      throw error;
    });
  }

  toolLabels() {
    return this.get("/tool-labels");
  }

  demoCustomers() {
    return this.get("/auth/demo/customers");
  }

  demoLogin(role, userId, name) {
    const body = { role };
    if (userId) body.user_id = userId;
    if (name) body.name = name;
    return this.post("/auth/demo", body);
  }

  listThreads(cursor) {
    const query = new URLSearchParams({ limit: "30" });
    if (cursor) query.set("cursor", cursor);
    return this.get(`/threads?${query}`);
  }

  createThread() {
    return this.post("/threads", {});
  }

  state(threadId) {
    return this.get(`/threads/${encodeURIComponent(threadId)}/state`);
  }

  history(threadId, before) {
    const query = new URLSearchParams({ limit: "50" });
    if (before) query.set("before", before);
    return this.get(`/threads/${encodeURIComponent(threadId)}/history?${query}`);
  }

  rewind(threadId, target) {
    return this.post(`/threads/${encodeURIComponent(threadId)}/rewind`, target);
  }

  deleteThread(threadId) {
    return this.request("DELETE", `/threads/${encodeURIComponent(threadId)}`);
  }

  memory() {
    return this.get("/me/memory");
  }

  forgetMemory(key) {
    return this.request("DELETE", `/me/memory/${encodeURIComponent(key)}`);
  }

  /** APP_ENV=dev only (404 otherwise): what this user's conversations sent, codes included. */
  outbox() {
    return this.get("/me/outbox");
  }

  /** The answer to a message, as `follow` yields it (options: signal, cursor). */
  sendMessage(threadId, content, clientMessageId, options = {}) {
    const path = `/threads/${encodeURIComponent(threadId)}/messages`;
    const body = { content, client_message_id: clientMessageId };
    return this.follow(() => this.openStream("POST", path, { body, signal: options.signal }), options);
  }

  /** The run that carries on after a confirmation, as `follow` yields it. */
  resume(threadId, decision, options = {}) {
    const path = `/threads/${encodeURIComponent(threadId)}/resume`;
    return this.follow(() => this.openStream("POST", path, { body: { decision }, signal: options.signal }), options);
  }

  /** Follow a run already going (or replay a finished one) from the event after cursor.lastId. */
  followRun({ cursor, signal }) {
    const open = () =>
      this.openStream("GET", `${cursor.location}/stream`, {
        headers: { "Last-Event-ID": String(cursor.lastId) },
        signal,
      });
    return this.follow(open, { cursor, signal });
  }

  /** Ask a run to stop; it ends with `done` status "cancelled". */
  cancelRun(location) {
    return this.post(`${location}/cancel`);
  }

  /** The thread's newest run ({run_id, status, ...}) or null. */
  async latestRun(threadId) {
    const page = await this.get(`/threads/${encodeURIComponent(threadId)}/runs?limit=1`);
    return page?.items?.[0] || null;
  }

  // --- staff (the console) ----------------------------------------------------------------

  /** Threads waiting for a person or held by one: which is queued | mine | human | all. */
  staffQueue(which) {
    return this.get(`/staff/threads?${new URLSearchParams({ control: which })}`);
  }

  /** The whole transcript, its control state and the history of who held it. */
  staffThread(threadId) {
    return this.get(`/staff/threads/${encodeURIComponent(threadId)}`);
  }

  /** accept | take_over | transfer (to) | release (note), compare-and-set on version. */
  staffControl(threadId, action, version, extra = {}) {
    return this.post(`/staff/threads/${encodeURIComponent(threadId)}/control`, { action, version, ...extra });
  }

  staffSay(threadId, content, clientMessageId) {
    const path = `/staff/threads/${encodeURIComponent(threadId)}/messages`;
    return this.post(path, { content, client_message_id: clientMessageId });
  }

  /** A run's path, as Content-Location names it. */
  static runLocation(threadId, runId) {
    return `/threads/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(runId)}`;
  }
}
