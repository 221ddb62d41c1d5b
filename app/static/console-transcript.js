// The console's transcript: every message with its author, the agent's tool calls and their
// results, confirmations waiting, notes handed back, and the history of who held the thread.

import { clear, h, prettyJson, prettyText, relativeTime } from "./dom.js";
import { renderMarkdown } from "./markdown.js";
import { resultSummary, toolLabel } from "./tools.js";

export class Transcript {
  constructor(log) {
    this.log = log;
    this.calls = new Map(); // tool call id -> its line, for the result to join
  }

  render(messages, pending) {
    clear(this.log);
    this.calls.clear();
    for (const m of messages || []) this.add(m);
    for (const p of pending || []) {
      this.log.append(
        h(
          "p",
          { class: "pending", dataset: { testid: "transcript-pending" } },
          `Waiting for the customer's confirmation: ${p.summary || toolLabel(p.name, p.args)}`,
        ),
      );
    }
    if (!this.log.childElementCount) this.log.append(h("p", { class: "muted" }, "No messages yet."));
    this.scrollToEnd();
  }

  has(id) {
    return Boolean(id) && Boolean(this.log.querySelector(`[data-message-id="${CSS.escape(id)}"]`));
  }

  /** One message as the transcript or the thread's stream gives it (once per id). */
  add(m) {
    if (this.has(m.id)) return;
    this.log.querySelector(":scope > .muted")?.remove();
    const node = this.nodeFor(m);
    if (!node) return;
    if (m.id) node.dataset.messageId = m.id;
    this.log.append(node);
    this.scrollToEnd();
  }

  nodeFor(m) {
    if (m.role === "tool") return this.toolResult(m);
    if (m.author === "staff" && m.kind === "note") {
      return h("p", { class: "note", dataset: { testid: "transcript-note" } }, `Note for the assistant from ${m.name}: ${m.content}`);
    }
    if (m.author === "staff") return message("msg-staff", "transcript-staff", m.name || "Staff", m.content);
    if (m.role === "user" || m.author === "customer") return message("msg-user", "transcript-customer", "Customer", m.content);
    if (m.role === "assistant") return this.agentTurn(m);
    return null;
  }

  agentTurn(m) {
    const part = h("div", { class: "agent-turn", dataset: { testid: "transcript-agent-turn" } });
    if (m.content) {
      const bubble = h("div", { class: "bubble md" });
      bubble.append(renderMarkdown(m.content));
      part.append(h("article", { class: "msg msg-assistant", dataset: { testid: "transcript-agent" } }, label("Assistant"), bubble));
    }
    for (const call of m.tool_calls || []) {
      const line = h(
        "div",
        { class: "tool", dataset: { testid: "transcript-tool-call", toolName: call.name, status: "running" } },
        h(
          "div",
          { class: "tool-line" },
          h("span", { class: "tool-icon", "aria-hidden": "true" }),
          h("span", { class: "tool-label" }, toolLabel(call.name, call.args)),
        ),
        h("details", { class: "tool-result" }, h("summary", {}, `${call.name} arguments`), h("pre", {}, prettyJson(call.args || {}))),
      );
      this.calls.set(call.id, line);
      part.append(line);
    }
    return part.childElementCount ? part : null;
  }

  toolResult(m) {
    const summary = resultSummary(m.status === "error" ? "error" : "ok", m.content, m.name);
    const result = h(
      "details",
      { class: "tool-result", dataset: { testid: "transcript-tool-result" } },
      h("summary", {}, summary.text),
      h("pre", {}, prettyText(m.content)),
    );
    const line = this.calls.get(m.tool_call_id);
    if (!line) return h("div", { class: "tool", dataset: { status: summary.kind } }, result);
    line.dataset.status = summary.kind;
    line.append(result);
    return null;
  }

  scrollToEnd() {
    this.log.scrollTop = this.log.scrollHeight;
  }
}

function label(text) {
  return h("span", { class: "msg-author" }, text);
}

function message(kind, testid, author, content) {
  return h(
    "article",
    { class: `msg ${kind}`, dataset: { testid } },
    label(author),
    h("div", { class: "bubble", dataset: { testid: "message-text" } }, content),
  );
}

const ACTIONS = {
  handoff: "handed off",
  accept: "accepted",
  take_over: "taken over",
  transfer: "transferred",
  release: "handed back to the assistant",
};

/** A member of staff as the customer sees them (the name they signed in with); the id is a
 * detail, on hover. */
function person(id, name) {
  if (!name || name === id) return h("span", {}, id);
  return h("span", { class: "person", title: id }, name);
}

/** The history of who held the thread, oldest first. */
export function renderHistory(list, history) {
  clear(list);
  for (const item of history || []) {
    const who = item.actor === "agent" ? "the assistant" : person(item.actor, item.actor_name);
    const to = item.action === "transfer" && item.assignee ? [" to ", person(item.assignee, item.assignee_name)] : [];
    const note = item.note ? ` (note: ${item.note})` : "";
    list.append(
      h(
        "li",
        { dataset: { testid: "history-item", action: item.action } },
        ACTIONS[item.action] || item.action,
        ...to,
        " by ",
        who,
        `, ${relativeTime(item.at)}${note}`,
      ),
    );
  }
}
