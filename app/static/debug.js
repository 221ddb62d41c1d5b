// The debug drawer: the thread's state and checkpoint history, with "rewind to here", and a
// note when the assistant works from a summary of the earlier messages.

import { userMessage } from "./api.js";
import { clear, h, prettyJson, relativeTime } from "./dom.js";

export class DebugDrawer {
  constructor(drawer, toggle, { api, threadId, onRewind }) {
    this.drawer = drawer;
    this.toggleButton = toggle;
    this.api = api;
    this.threadId = threadId;
    this.onRewind = onRewind;
    this.build();
    toggle.addEventListener("click", () => (this.isOpen ? this.close() : this.open()));
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this.isOpen) this.close();
    });
    this.seq = 0;
  }

  get isOpen() {
    return !this.drawer.hidden;
  }

  build() {
    this.statePre = h("pre", { class: "json", dataset: { testid: "debug-state" }, tabindex: "0" });
    this.historyList = h("ol", { class: "checkpoints", dataset: { testid: "debug-history" } });
    this.olderButton = h("button", { type: "button", hidden: true, onclick: () => this.loadOlder() }, "Older checkpoints");
    this.status = h("p", { class: "muted", role: "status", tabindex: "-1", dataset: { testid: "debug-status" } });
    this.summaryText = h("blockquote", { class: "summary-text", dataset: { testid: "debug-summary-text" } });
    this.summaryNote = h(
      "section",
      { class: "summary-note", hidden: true, dataset: { testid: "debug-summary" } },
      h("p", { class: "muted" }, "Earlier messages are summarised for the assistant:"),
      this.summaryText,
    );
    this.closeButton = h(
      "button",
      { type: "button", class: "icon", "aria-label": "Close debug drawer", dataset: { testid: "debug-close" }, onclick: () => this.close() },
      "✕",
    );
    clear(this.drawer).append(
      h(
        "header",
        { class: "drawer-head" },
        h("h2", {}, "Debug"),
        h("button", { type: "button", dataset: { testid: "debug-refresh" }, onclick: () => this.refresh() }, "Refresh"),
        this.closeButton,
      ),
      this.status,
      this.summaryNote,
      h("section", {}, h("h3", {}, "State ", h("code", {}, "GET /state")), this.statePre),
      h("section", {}, h("h3", {}, "History ", h("code", {}, "GET /history")), this.historyList, this.olderButton),
    );
  }

  open() {
    this.drawer.hidden = false;
    this.toggleButton.setAttribute("aria-expanded", "true");
    document.body.classList.add("debug-open");
    this.closeButton.focus();
    return this.refresh();
  }

  close() {
    if (this.drawer.hidden) return;
    this.drawer.hidden = true;
    this.toggleButton.setAttribute("aria-expanded", "false");
    document.body.classList.remove("debug-open");
    this.toggleButton.focus();
  }

  async refresh() {
    if (!this.isOpen) return;
    const seq = ++this.seq; // only the latest refresh may fill the drawer
    const id = this.threadId();
    if (!id) {
      clear(this.historyList);
      this.cursor = null;
      this.statePre.textContent = "";
      this.showSummary(null);
      this.status.textContent = "No conversation yet: send a message first.";
      this.olderButton.hidden = true;
      return;
    }
    this.status.textContent = "Loading …";
    try {
      const [state, history] = await Promise.all([this.api.state(id), this.api.history(id)]);
      if (seq !== this.seq) return;
      this.statePre.textContent = prettyJson(state);
      this.showSummary(state?.summary);
      clear(this.historyList);
      this.appendHistory(history);
      this.status.textContent = `Thread ${id}`;
    } catch (error) {
      if (seq === this.seq) this.status.textContent = userMessage(error, "Could not load the debug view.");
    }
  }

  /** The messages list still holds the whole transcript; the model sees this instead. */
  showSummary(summary) {
    const text = typeof summary === "string" ? summary.trim() : "";
    this.summaryNote.hidden = !text;
    this.summaryText.textContent = text;
  }

  async loadOlder() {
    const id = this.threadId();
    if (!id || !this.cursor) return;
    try {
      this.appendHistory(await this.api.history(id, this.cursor));
    } catch (error) {
      this.status.textContent = userMessage(error, "Could not load older history.");
    }
  }

  appendHistory(page) {
    for (const item of page.items) this.historyList.append(this.checkpoint(item));
    this.cursor = page.next_cursor;
    this.olderButton.hidden = !this.cursor;
  }

  checkpoint(item) {
    const last = item.last_message;
    const facts = [
      `step ${item.step ?? "?"}`,
      item.source,
      `${item.message_count} messages`,
      item.next?.length ? `next: ${item.next.join(", ")}` : null,
    ].filter(Boolean);
    return h(
      "li",
      { class: "checkpoint", dataset: { testid: "checkpoint", checkpointId: item.checkpoint_id || "" } },
      h(
        "div",
        { class: "checkpoint-head" },
        h("span", {}, facts.join(" · ")),
        item.created_at ? h("time", { datetime: item.created_at }, relativeTime(item.created_at)) : null,
      ),
      last ? h("p", { class: "checkpoint-last" }, h("strong", {}, `${last.role}: `), last.content || "(no text)") : null,
      h("details", {}, h("summary", {}, "JSON"), h("pre", { class: "json" }, prettyJson(item))),
      h(
        "button",
        {
          type: "button",
          dataset: { testid: "rewind-checkpoint" },
          disabled: !item.checkpoint_id,
          onclick: async () => {
            await this.onRewind(item.checkpoint_id);
            this.status.focus(); // the button is gone with the old history
          },
        },
        "Rewind to here",
      ),
    );
  }
}
