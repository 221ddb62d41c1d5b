// The sidebar: the signed-in person's threads, newest activity first.

import { userMessage } from "./api.js";
import { clear, h, relativeTime } from "./dom.js";

export const UNTITLED = "New conversation";

export class ThreadList {
  constructor(list, moreButton, { onSelect }) {
    this.list = list;
    this.more = moreButton;
    this.onSelect = onSelect;
    this.items = [];
    this.cursor = null;
    this.activeId = null;
    this.more.addEventListener("click", () => this.loadMore());
  }

  async load(api) {
    this.api = api;
    const page = await api.listThreads();
    this.items = page.items;
    this.cursor = page.next_cursor;
    this.render();
  }

  async loadMore() {
    if (!this.cursor) return;
    let page;
    try {
      page = await this.api.listThreads(this.cursor);
    } catch (error) {
      // 401: sign-in takes over. Otherwise say so on the button, which retries when pressed.
      if (error?.status !== 401) {
        this.more.textContent = "Could not load more; retry";
        this.more.title = userMessage(error);
      }
      return;
    }
    this.more.textContent = "Load more";
    this.more.removeAttribute("title");
    const known = new Set(this.items.map((t) => t.id));
    this.items.push(...page.items.filter((t) => !known.has(t.id)));
    this.cursor = page.next_cursor;
    this.render();
  }

  remove(id) {
    this.items = this.items.filter((t) => t.id !== id);
    this.render();
  }

  title(id) {
    return this.items.find((t) => t.id === id)?.title || UNTITLED;
  }

  setActive(id) {
    this.activeId = id;
    for (const button of this.list.querySelectorAll("button[data-thread-id]")) {
      if (button.dataset.threadId === id) button.setAttribute("aria-current", "true");
      else button.removeAttribute("aria-current");
    }
  }

  render() {
    clear(this.list);
    if (!this.items.length) {
      this.list.append(h("li", { class: "muted", dataset: { testid: "no-threads" } }, "No conversations yet."));
    }
    for (const t of this.items) {
      const when = relativeTime(t.updated_at);
      const button = h(
        "button",
        {
          type: "button",
          class: "thread",
          dataset: { testid: "thread-item", threadId: t.id },
          onclick: () => this.onSelect(t.id),
        },
        h("span", { class: "thread-title", dataset: { testid: "thread-title" } }, t.title || UNTITLED),
        h(
          "span",
          { class: "thread-meta" },
          // No message count: the API's message_count holds tool steps too ("18 messages"
          // after 4 exchanges), which is not what a customer would count.
          h("time", { datetime: t.updated_at, title: new Date(t.updated_at).toLocaleString() }, when),
        ),
      );
      if (t.id === this.activeId) button.setAttribute("aria-current", "true");
      this.list.append(h("li", {}, button));
    }
    this.more.hidden = !this.cursor;
  }
}
