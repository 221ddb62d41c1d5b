// The conversation view: messages from a thread's state, and a run's events as they stream.

import { clear, h, prettyText } from "./dom.js";
import { renderMarkdown } from "./markdown.js";
import { resultSummary, toolLabel } from "./tools.js";

const RENDER_EVERY_MS = 40;
const HANDOFF_TOOL = "transfer_to_human_agents";
export const BACK_WITH_ASSISTANT = "You are back with the assistant";
let cardCount = 0;

export class ChatView {
  /**
   * log: the scrolling message list (an ARIA live region); typing: the "…" indicator.
   * handlers: onEdit(messageId, text), onDecision(decision), onRetry(context).
   */
  constructor(log, typing, handlers) {
    this.log = log;
    this.typing = typing;
    this.handlers = handlers;
    this.tools = new Map(); // tool call id -> its activity element
    this.bubble = null; // the assistant message receiving tokens
    this.lastBubble = null; // the one before, which a resumed run may continue
    this.busy = false;
    this.person = null; // the member of staff answering, as far as the page knows
  }

  // --- whole conversations --------------------------------------------------------------

  reset() {
    clear(this.log);
    this.tools.clear();
    if (this.bubble) clearTimeout(this.bubble.timer);
    this.bubble = null;
    this.lastBubble = null;
    this.person = null;
  }

  showEmpty() {
    this.reset();
    this.log.append(
      h(
        "div",
        { class: "empty", dataset: { testid: "empty-state" } },
        h("p", { class: "empty-title" }, "How can we help?"),
        h("p", {}, "Ask about an order, a product, a return or shipping."),
      ),
    );
  }

  renderState(state) {
    this.reset();
    const messages = state?.messages || [];
    if (!messages.length && !state?.pending) {
      this.showEmpty();
      return;
    }
    // Citations belong to a turn: the n-th user message and everything up to the next one.
    const cited = new Map();
    for (const c of state?.citations || []) {
      if (!cited.has(c.turn)) cited.set(c.turn, []);
      cited.get(c.turn).push(c);
    }
    let turn = 0;
    const endTurn = () => {
      if (cited.has(turn)) this.citations(cited.get(turn));
    };
    let handedOffAt = -1;
    let releasedAt = -1;
    for (const [i, m] of messages.entries()) {
      if (m.author === "staff") {
        if (m.kind === "note") {
          // The note is for the assistant; the customer sees only that it is back.
          if (this.person) this.backWithAssistant();
          releasedAt = i;
        } else {
          if (this.person !== m.name) this.personJoined(m.name);
          this.addStaff(m);
        }
        continue;
      }
      if (m.role === "tool" && m.name === HANDOFF_TOOL) handedOffAt = i;
      if (m.role === "user") {
        endTurn();
        turn += 1;
        this.addUser(m.content, m.id);
      } else if (m.role === "assistant") {
        if (m.content) this.addAssistant(m.content);
        for (const call of m.tool_calls || []) this.toolCall(call);
      } else if (m.role === "tool") {
        this.toolResult({
          id: m.tool_call_id,
          name: m.name,
          status: m.status === "error" ? "error" : "ok",
          content: m.content,
        });
      }
    }
    endTurn();
    if (state.pending?.length) this.interrupt({ pending: state.pending }, { focus: false });
    if (state.handed_off && handedOffAt > releasedAt) {
      this.notice("This conversation has been handed over to a human agent, who will follow up.", {
        kind: "info",
      });
    }
    this.scrollToEnd(true);
  }

  // --- single items ---------------------------------------------------------------------

  removeEmpty() {
    this.log.querySelector(".empty")?.remove();
  }

  addUser(text, id = null) {
    this.removeEmpty();
    this.endBubble();
    const body = h("div", { class: "bubble", dataset: { testid: "message-text" } }, text);
    const article = h(
      "article",
      { class: "msg msg-user", dataset: { testid: "message-user" }, "aria-label": "You" },
      body,
    );
    if (id) {
      article.dataset.messageId = id;
      article.append(
        h(
          "button",
          {
            type: "button",
            class: "link edit",
            dataset: { testid: "edit-message" },
            "aria-label": "Edit this message and regenerate the answer",
            disabled: this.busy,
            onclick: () => this.startEdit(article, text),
          },
          "Edit",
        ),
      );
    }
    this.log.append(article);
    this.scrollToEnd(true);
    return article;
  }

  /** A message from the member of staff who holds the conversation (once per id). */
  addStaff({ id, name, content }) {
    if (this.hasMessage(id)) return null;
    this.removeEmpty();
    this.endBubble();
    const article = h(
      "article",
      { class: "msg msg-staff", dataset: { testid: "message-staff" }, "aria-label": name || "Support" },
      h("span", { class: "msg-author", dataset: { testid: "message-author" } }, name || "Support"),
      h("div", { class: "bubble", dataset: { testid: "message-text" } }, content),
    );
    if (id) article.dataset.messageId = id;
    this.log.append(article);
    this.scrollToEnd(true);
    return article;
  }

  hasMessage(id) {
    return Boolean(id) && Boolean(this.log.querySelector(`[data-message-id="${CSS.escape(id)}"]`));
  }

  /** A line about who answers the conversation (it stays, unlike a notice). */
  controlLine(text, state) {
    this.removeEmpty();
    this.endBubble();
    const line = h("p", { class: "control-line", role: "status", dataset: { testid: "control-line", state } }, text);
    this.log.append(line);
    this.scrollToEnd(true);
    return line;
  }

  personJoined(name) {
    this.person = name || "A member of our team";
    return this.controlLine(`${this.person} joined the conversation`, "human");
  }

  backWithAssistant() {
    this.person = null;
    return this.controlLine(BACK_WITH_ASSISTANT, "agent");
  }

  /** The customer's message reached the person holding the conversation (no reply to wait for). */
  markSent(article, message) {
    if (!article) return;
    if (message?.id) article.dataset.messageId = message.id;
    article.dataset.status = "sent";
    if (!article.querySelector(".msg-status")) {
      article.append(h("span", { class: "msg-status", dataset: { testid: "message-status" } }, "Sent"));
    }
  }

  addAssistant(text) {
    this.removeEmpty();
    const body = h("div", { class: "bubble md", dataset: { testid: "message-text" } });
    body.append(renderMarkdown(text));
    const article = h(
      "article",
      { class: "msg msg-assistant", dataset: { testid: "message-assistant" }, "aria-label": "Assistant" },
      body,
    );
    this.log.append(article);
    return article;
  }

  startEdit(article, text) {
    if (this.busy || article.classList.contains("editing")) return;
    const bubble = article.querySelector(".bubble");
    const editButton = article.querySelector(".edit");
    const input = h("textarea", {
      class: "edit-input",
      dataset: { testid: "edit-input" },
      "aria-label": "Edit your message",
      rows: 3,
    });
    input.value = text;
    const finish = () => {
      form.remove();
      bubble.hidden = false;
      editButton.hidden = false;
      article.classList.remove("editing");
      editButton.focus();
    };
    const save = () => {
      const value = input.value.trim();
      if (!value) return;
      if (value === text.trim()) {
        finish();
        return;
      }
      this.handlers.onEdit(article.dataset.messageId, value);
    };
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        save();
      } else if (event.key === "Escape") {
        finish();
      }
    });
    const form = h(
      "form",
      {
        class: "edit-form",
        onsubmit: (event) => {
          event.preventDefault();
          save();
        },
      },
      input,
      h(
        "div",
        { class: "row" },
        h("button", { type: "submit", class: "primary", dataset: { testid: "edit-save" } }, "Save & regenerate"),
        h("button", { type: "button", dataset: { testid: "edit-cancel" }, onclick: finish }, "Cancel"),
      ),
    );
    article.classList.add("editing");
    bubble.hidden = true;
    editButton.hidden = true;
    article.append(form);
    input.focus();
    input.setSelectionRange(input.value.length, input.value.length);
  }

  // --- a run's events -------------------------------------------------------------------

  token(text) {
    if (!text) return;
    if (!this.bubble) {
      const article = this.addAssistant("");
      article.dataset.streaming = "true";
      this.bubble = { article, body: article.querySelector(".bubble"), text: "", timer: null };
    }
    this.bubble.text += text;
    if (!this.bubble.timer) {
      const bubble = this.bubble;
      bubble.timer = setTimeout(() => this.paint(bubble), RENDER_EVERY_MS);
    }
  }

  paint(bubble) {
    clearTimeout(bubble.timer);
    bubble.timer = null;
    clear(bubble.body).append(renderMarkdown(bubble.text));
    this.scrollToEnd();
  }

  /** The streamed text so far is final (a tool call, the end of the run ...). */
  endBubble() {
    if (!this.bubble) return;
    this.paint(this.bubble);
    delete this.bubble.article.dataset.streaming;
    this.lastBubble = this.bubble;
    this.bubble = null;
  }

  /** Where the run about to stream starts: its events go after this element. */
  mark() {
    return this.log.lastElementChild;
  }

  /** Take a run's events off the screen (to show them again from its first one). */
  truncateAfter(mark) {
    if (!mark?.isConnected || mark.parentElement !== this.log) return false;
    if (this.bubble) clearTimeout(this.bubble.timer);
    this.bubble = null;
    this.lastBubble = null;
    while (mark.nextElementSibling) mark.nextElementSibling.remove();
    for (const [id, line] of this.tools) if (!line.isConnected) this.tools.delete(id);
    return true;
  }

  /** Tokens continue the answer last streamed, if it is still the end of the conversation. */
  reopenBubble() {
    const last = this.lastBubble;
    if (this.bubble || !last?.article.isConnected || last.article !== this.log.lastElementChild) return;
    last.article.dataset.streaming = "true";
    this.bubble = last;
  }

  toolCall({ id, name, args }) {
    this.endBubble();
    this.removeEmpty();
    const existing = id && this.tools.get(id);
    if (existing) return existing;
    const line = h(
      "div",
      {
        class: "tool",
        role: "status",
        dataset: { testid: "tool-activity", toolName: name || "", status: "running" },
      },
      h(
        "div",
        { class: "tool-line" },
        h("span", { class: "tool-icon", "aria-hidden": "true" }),
        h("span", { class: "tool-label", dataset: { testid: "tool-label" } }, toolLabel(name, args)),
      ),
    );
    if (id) this.tools.set(id, line);
    this.log.append(line);
    this.scrollToEnd();
    return line;
  }

  toolResult({ id, name, status, content }) {
    this.endBubble();
    const line = (id && this.tools.get(id)) || this.toolCall({ id, name, args: {} });
    const summary = resultSummary(status, content, name);
    line.dataset.status = summary.kind;
    line.querySelector(".tool-result")?.remove();
    line.append(
      h(
        "details",
        { class: "tool-result", dataset: { testid: "tool-result" } },
        h("summary", { dataset: { testid: "tool-summary" } }, summary.text),
        h("pre", { dataset: { testid: "tool-content" } }, prettyText(content)),
      ),
    );
    this.scrollToEnd();
  }

  interrupt({ pending }, { focus = true } = {}) {
    this.endBubble();
    this.log.querySelectorAll(".confirm:not([data-decided])").forEach((card) => card.remove());
    for (const p of pending || []) {
      const line = this.tools.get(p.id);
      if (line) line.dataset.status = "waiting";
    }
    const buttons = [
      h("button", { type: "button", class: "primary", dataset: { testid: "approve" } }, "Approve"),
      h("button", { type: "button", class: "danger", dataset: { testid: "decline" } }, "Decline"),
    ];
    const outcome = h("p", { class: "confirm-outcome", dataset: { testid: "confirm-outcome" }, hidden: true });
    const titleId = `confirm-title-${++cardCount}`;
    const card = h(
      "section",
      { class: "confirm", dataset: { testid: "confirm-card" }, "aria-labelledby": titleId },
      h("h2", { id: titleId, class: "confirm-title" }, "Please confirm this change"),
      h(
        "ul",
        { class: "confirm-list" },
        (pending || []).map((p) =>
          h("li", { dataset: { testid: "pending-summary" } }, p.summary || toolLabel(p.name, p.args)),
        ),
      ),
      h("div", { class: "row" }, buttons),
      outcome,
    );
    const decide = (decision) => {
      if (this.busy) return;
      card.dataset.decided = decision;
      for (const b of buttons) b.disabled = true;
      outcome.hidden = false;
      outcome.textContent = decision === "approve" ? "Approved. Continuing …" : "Declined. Nothing will change.";
      this.handlers.onDecision(decision, card);
    };
    buttons[0].addEventListener("click", () => decide("approve"));
    buttons[1].addEventListener("click", () => decide("reject"));
    this.log.append(card);
    this.scrollToEnd(true);
    if (focus) this.focusDecision();
  }

  /** Put the keyboard on the Approve button of the card waiting for a decision. */
  focusDecision() {
    this.log.querySelector('.confirm:not([data-decided]) [data-testid="approve"]')?.focus({ preventScroll: true });
  }

  /** The help articles an answer is based on, as links to their pages. */
  citations(list) {
    if (!list?.length) return;
    this.endBubble();
    this.log.append(
      h(
        "aside",
        { class: "sources", dataset: { testid: "sources" }, "aria-label": "Sources" },
        h("span", { class: "sources-label" }, "Sources:"),
        h(
          "ul",
          {},
          list.map((c) =>
            h(
              "li",
              {},
              h(
                "a",
                {
                  href: `/help/${encodeURIComponent(c.id)}`,
                  target: "_blank",
                  rel: "noopener",
                  title: c.snippet || null,
                  dataset: { testid: "source-link" },
                },
                c.title || c.id,
              ),
            ),
          ),
        ),
      ),
    );
    this.scrollToEnd();
  }

  /** A message about the conversation; `retry` adds a Retry button. */
  notice(text, { kind = "error", retry = null } = {}) {
    this.endBubble();
    const el = h(
      "div",
      { class: `notice notice-${kind}`, role: kind === "error" ? "alert" : "status", dataset: { testid: "notice", kind } },
      h("span", { class: "notice-text" }, text),
    );
    if (retry) {
      el.append(
        h(
          "button",
          {
            type: "button",
            dataset: { testid: "retry" },
            onclick: () => {
              el.remove();
              retry();
            },
          },
          "Retry",
        ),
      );
    }
    this.log.append(el);
    this.scrollToEnd(true);
    return el;
  }

  clearNotices() {
    this.log.querySelectorAll(".notice").forEach((n) => n.remove());
  }

  setBusy(busy) {
    this.busy = busy;
    this.typing.hidden = !busy;
    this.log.setAttribute("aria-busy", busy ? "true" : "false");
    this.log.querySelectorAll(".edit").forEach((b) => {
      b.disabled = busy;
    });
    if (!busy) this.endBubble();
  }

  scrollToEnd(force = false) {
    const log = this.log;
    const nearEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 120;
    if (force || nearEnd) log.scrollTop = log.scrollHeight;
  }
}
