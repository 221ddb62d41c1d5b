// A thread's own stream (`/events`): messages from the customer and from staff, and changes
// of who answers (`control`), followed for as long as a page shows the thread. A dropped
// connection is opened again with Last-Event-ID, so nothing is missed or repeated.

import { ApiError, BACKOFF_MS, sleep, STALL_MS, StallWatch } from "./api.js";
import { readEvents } from "./sse.js";

export class ThreadEvents {
  /**
   * path: `/threads/{session}/events` or `/staff/threads/{thread}/events`.
   * onEvent({type, data, id, openedAt}): `openedAt` is the server's clock (ms) when the
   * stream was first opened, to tell what happened before the page looked from what is new.
   * onStatus("live" | "reconnecting" | "closed").
   */
  constructor(api, path, { lastId = 0, onEvent, onStatus = () => {} }) {
    this.api = api;
    this.path = path;
    this.lastId = lastId;
    this.onEvent = onEvent;
    this.onStatus = onStatus;
    this.controller = new AbortController();
    this.openedAt = null;
  }

  start() {
    this.run().catch(() => {}); // only an abort ends it with an error
    return this;
  }

  stop() {
    this.controller.abort();
  }

  get stopped() {
    return this.controller.signal.aborted;
  }

  async run() {
    const signal = this.controller.signal;
    let attempt = 0;
    while (!this.stopped) {
      let response = null;
      try {
        response = await this.api.openStream("GET", this.path, {
          headers: { "Last-Event-ID": String(this.lastId) },
          signal,
        });
      } catch (error) {
        if (this.stopped) return;
        if (error instanceof ApiError && [401, 403, 404].includes(error.status)) {
          this.onStatus("closed"); // signed out, or the thread is gone: nothing to follow
          return;
        }
      }
      if (response) {
        this.openedAt ??= Date.parse(response.headers.get("Date") || "") || Date.now();
        this.onStatus("live");
        if (await this.read(response, signal)) attempt = 0;
      }
      if (this.stopped) return;
      this.onStatus("reconnecting");
      await sleep(BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)], signal);
      attempt += 1;
    }
  }

  /** Events until the connection drops; true if anything (even a heartbeat) came. */
  async read(response, signal) {
    const watch = new StallWatch(signal, STALL_MS);
    let flowing = false;
    const onComment = () => {
      flowing = true;
      watch.poke();
    };
    try {
      for await (const event of readEvents(response, { signal: watch.signal, onComment })) {
        onComment();
        const id = Number.parseInt(event.id, 10);
        if (Number.isFinite(id)) {
          if (id <= this.lastId) continue;
          this.lastId = id;
        }
        let data = null;
        try {
          data = event.data ? JSON.parse(event.data) : null;
        } catch {
          continue; // not an event of this stream
        }
        try {
          this.onEvent({ type: event.type, data, id: event.id, openedAt: this.openedAt });
        } catch (error) {
          setTimeout(() => {
            throw error; // a bug in the page, not a dropped stream: report it as one
          });
        }
      }
    } catch {
      /* dropped or stalled: the caller opens it again */
    } finally {
      watch.stop();
    }
    return flowing;
  }
}

/** A control change the page saw happen, rather than one from before it looked. */
export function isNew(control, openedAt, slackMs = 5000) {
  const since = Date.parse(control?.since || "");
  return !Number.isFinite(since) || openedAt === null || since >= openedAt - slackMs;
}
