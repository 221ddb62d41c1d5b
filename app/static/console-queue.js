// The console's queue: conversations waiting for a person (or held by one), oldest first,
// polled every few seconds; tabs for queued, mine and all.

import { userMessage } from "./api.js";
import { clear, h } from "./dom.js";

const POLL_MS = 3000;
const STATES = { agent: "with the assistant", queued: "waiting", human: "held" };

/** "45 s", "3 min", "2 h" */
export function waited(seconds) {
  const s = Math.max(0, Math.round(Number(seconds) || 0));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

export class QueueList {
  /** tabs: the buttons with data-filter; onSelect(item); onTick() after each poll. */
  constructor(list, tabs, { onSelect, onTick = () => {} }) {
    this.list = list;
    this.tabs = tabs;
    this.onSelect = onSelect;
    this.onTick = onTick;
    this.filter = "queued";
    this.activeId = null;
    this.timer = null;
    this.api = null;
    this.loading = null;
    for (const tab of tabs) tab.addEventListener("click", () => this.show(tab.dataset.filter));
  }

  start(api) {
    this.api = api;
    this.stop();
    this.show(this.filter);
    this.timer = setInterval(() => this.refresh().then(() => this.onTick()), POLL_MS);
  }

  stop() {
    clearInterval(this.timer);
    this.timer = null;
  }

  show(filter) {
    this.filter = filter;
    for (const tab of this.tabs) tab.setAttribute("aria-selected", String(tab.dataset.filter === filter));
    return this.refresh();
  }

  /** One request at a time: a poll that comes while one is out waits for it. */
  refresh() {
    this.loading ??= this.load().finally(() => {
      this.loading = null;
    });
    return this.loading;
  }

  async load() {
    const filter = this.filter;
    let page;
    try {
      page = await this.api.staffQueue(filter);
    } catch (error) {
      if (error?.status === 401 || filter !== this.filter) return;
      clear(this.list).append(h("li", { class: "muted", role: "alert" }, userMessage(error)));
      return;
    }
    if (filter === this.filter) this.render(page.items);
  }

  setActive(id) {
    this.activeId = id;
    for (const b of this.list.querySelectorAll("button[data-thread-id]")) {
      if (b.dataset.threadId === id) b.setAttribute("aria-current", "true");
      else b.removeAttribute("aria-current");
    }
  }

  render(items) {
    clear(this.list);
    if (!items.length) {
      this.list.append(h("li", { class: "muted", dataset: { testid: "queue-empty" } }, "Nobody is waiting."));
    }
    for (const item of items) {
      const held = item.state === "human" ? ` by ${item.assignee_name || item.assignee}` : "";
      const button = h(
        "button",
        {
          type: "button",
          class: "thread",
          dataset: { testid: "queue-item", threadId: item.thread_id, state: item.state },
          onclick: () => this.onSelect(item),
        },
        h("span", { class: "thread-title" }, item.channel ? `${item.customer} · ${item.channel}` : item.customer),
        h("span", { class: "thread-summary", dataset: { testid: "queue-summary" } }, item.summary || item.title || ""),
        h("span", { class: "thread-meta" }, `${STATES[item.state] || item.state}${held} · ${waited(item.waiting_s)}`),
        item.last_message?.content
          ? h("span", { class: "thread-meta thread-summary" }, `${lastAuthor(item.last_message)}: ${item.last_message.content}`)
          : null,
      );
      if (item.thread_id === this.activeId) button.setAttribute("aria-current", "true");
      this.list.append(h("li", {}, button));
    }
  }
}

function lastAuthor(message) {
  if (message.author === "staff") return message.name || "Staff";
  return message.author === "customer" ? "Customer" : "Assistant";
}
