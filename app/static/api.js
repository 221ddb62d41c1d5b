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

  /**
   * POST and read the answer as SSE. Yields {type, data} with `data` parsed from JSON.
   * Throws ApiError for an HTTP error or an unreachable server; a connection dropped while
   * reading ends the iteration early (the caller notices there was no `done`).
   */
  async *stream(path, body, { signal } = {}) {
    const response = await this.fetch(path, {
      method: "POST",
      headers: this.headers({ Accept: "text/event-stream", "Content-Type": "application/json" }),
      body: JSON.stringify(body),
      signal,
    });
    try {
      for await (const event of readEvents(response)) {
        let data = null;
        try {
          data = event.data ? JSON.parse(event.data) : null;
        } catch {
          data = { text: event.data };
        }
        yield { type: event.type, data, id: event.id };
      }
    } catch (error) {
      if (error?.name === "AbortError") throw error;
      // The connection broke mid-stream: end quietly; no `done` tells the caller.
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

  demoCustomers() {
    return this.get("/auth/demo/customers");
  }

  demoLogin(role, userId) {
    return this.post("/auth/demo", userId ? { role, user_id: userId } : { role });
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

  sendMessage(threadId, content, clientMessageId, options) {
    return this.stream(
      `/threads/${encodeURIComponent(threadId)}/messages`,
      { content, client_message_id: clientMessageId },
      options,
    );
  }

  resume(threadId, decision, options) {
    return this.stream(`/threads/${encodeURIComponent(threadId)}/resume`, { decision }, options);
  }
}
