// Server-sent events over fetch: a parser that follows the WHATWG event-stream rules, and a
// reader for a Response body. (EventSource cannot POST or send an Authorization header.)

/**
 * Feed it decoded text in chunks of any size; it calls onEvent({type, data, id}) for each
 * complete event and onComment(text) for comment lines (the server's heartbeats).
 *
 * Lines end in CRLF, LF or CR; a CR at the end of one chunk and an LF at the start of the next
 * are one line ending. Several `data:` lines join with "\n". A field name without a colon has an
 * empty value; one space after the colon is dropped. Unknown fields are ignored. An event still
 * incomplete when the stream ends is discarded, as the spec says.
 */
export class SSEParser {
  constructor(onEvent, onComment = () => {}) {
    this.onEvent = onEvent;
    this.onComment = onComment;
    this.buffer = "";
    this.skipLeadingLF = false;
    this.atStart = true;
    this.lastEventId = "";
    this.reset();
  }

  reset() {
    this.dataLines = [];
    this.hasData = false;
    this.eventType = "";
  }

  feed(text) {
    if (!text) return;
    if (this.atStart) {
      this.atStart = false;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this.skipLeadingLF) {
      this.skipLeadingLF = false;
      if (text.startsWith("\n")) text = text.slice(1);
    }
    this.buffer += text;
    let start = 0;
    const buf = this.buffer;
    for (;;) {
      let i = start;
      while (i < buf.length && buf[i] !== "\n" && buf[i] !== "\r") i++;
      if (i >= buf.length) break;
      const line = buf.slice(start, i);
      if (buf[i] === "\r") {
        if (i + 1 < buf.length) {
          start = buf[i + 1] === "\n" ? i + 2 : i + 1;
        } else {
          start = i + 1;
          this.skipLeadingLF = true; // the LF of a CRLF may come in the next chunk
        }
      } else {
        start = i + 1;
      }
      this.line(line);
    }
    this.buffer = buf.slice(start);
  }

  line(line) {
    if (line === "") {
      this.dispatch();
      return;
    }
    if (line.startsWith(":")) {
      this.onComment(line.slice(1).trimStart());
      return;
    }
    const colon = line.indexOf(":");
    let field = line;
    let value = "";
    if (colon >= 0) {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
    }
    switch (field) {
      case "event":
        this.eventType = value;
        break;
      case "data":
        this.dataLines.push(value);
        this.hasData = true;
        break;
      case "id":
        if (!value.includes("\0")) this.lastEventId = value;
        break;
      default:
        break; // "retry" and unknown fields: nothing to do for a one-shot stream
    }
  }

  dispatch() {
    if (!this.hasData) {
      this.reset();
      return;
    }
    const event = {
      type: this.eventType || "message",
      data: this.dataLines.join("\n"),
      id: this.lastEventId,
    };
    this.reset();
    this.onEvent(event);
  }

  /** The stream ended: whatever was not terminated by a blank line is dropped. */
  end() {
    this.buffer = "";
    this.reset();
  }
}

/**
 * Yields the events of a fetch Response body as {type, data, id} in order. Returns when the
 * body ends; a network error while reading propagates (a TypeError, or an AbortError), and so
 * does `signal` firing (its reason), which also closes the connection.
 */
export async function* readEvents(response, { onComment, signal } = {}) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder("utf-8");
  const queue = [];
  const parser = new SSEParser((event) => queue.push(event), onComment);
  let finished = false;
  const onAbort = () => reader.cancel(signal.reason).catch(() => {});
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      const { value, done } = await reader.read();
      if (signal?.aborted) throw signal.reason;
      if (done) {
        finished = true;
        break;
      }
      parser.feed(decoder.decode(value, { stream: true }));
      while (queue.length) yield queue.shift();
    }
    parser.feed(decoder.decode());
    parser.end();
    while (queue.length) yield queue.shift();
  } finally {
    signal?.removeEventListener("abort", onAbort);
    // The consumer stopped early (or reading failed): close the connection.
    if (!finished) reader.cancel().catch(() => {});
  }
}
