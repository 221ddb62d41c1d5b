// "What we remember about you": the signed-in customer's remembered preferences, each with
// when and in which conversation it was noted, and a Forget button. Guests have no memory of
// their own and see no panel.

import { userMessage } from "./api.js";
import { clear, h } from "./dom.js";

const TITLE_ID = "memory-title";

export class MemoryPanel {
  constructor(section, { api }) {
    this.section = section;
    this.api = api;
    this.enabled = false;
    this.seq = 0; // only the latest load may fill the list
    this.heading = h("h2", { id: TITLE_ID, tabindex: "-1" }, "What we remember about you");
    this.list = h("ul", { class: "memory-list", dataset: { testid: "memory-list" } });
    this.status = h("p", { class: "muted memory-status", role: "status", dataset: { testid: "memory-status" } });
    clear(section).append(this.heading, this.list, this.status);
    section.setAttribute("aria-labelledby", TITLE_ID);
  }

  /** Show the panel (and load it) for a customer; hide and empty it otherwise. */
  setEnabled(enabled) {
    this.enabled = enabled;
    this.seq += 1;
    this.section.hidden = !enabled;
    clear(this.list);
    this.status.textContent = "";
    return this.refresh();
  }

  async refresh() {
    if (!this.enabled) return;
    const seq = ++this.seq;
    try {
      const items = await this.api.memory();
      if (seq === this.seq) this.render(items || []);
    } catch (error) {
      if (seq === this.seq && error.status !== 401) this.status.textContent = "Could not load this just now.";
    }
  }

  render(items) {
    clear(this.list);
    for (const item of items) this.list.append(this.item(item));
    this.status.textContent = items.length ? "" : "Nothing yet.";
  }

  item({ key, value, updated_at: updatedAt, thread_id: threadId, verified_by: verifiedBy }) {
    const forget = h(
      "button",
      { type: "button", class: "link", dataset: { testid: "memory-forget" }, "aria-label": `Forget ${key}` },
      "Forget",
    );
    forget.addEventListener("click", () => this.forget(key, forget));
    return h(
      "li",
      { class: "memory-item", dataset: { testid: "memory-item", key } },
      h(
        "div",
        { class: "memory-body" },
        h("span", { class: "memory-text", dataset: { testid: "memory-text" } }, `${key}: ${value}`),
        h("span", { class: "memory-meta muted", dataset: { testid: "memory-meta" } }, provenance(updatedAt, threadId, verifiedBy)),
      ),
      forget,
    );
  }

  async forget(key, button) {
    button.disabled = true;
    try {
      await this.api.forgetMemory(key);
    } catch (error) {
      // 404: it was forgotten already (another tab, say): the reload below shows that.
      if (error.status !== 404) {
        button.disabled = false;
        if (error.status !== 401) this.status.textContent = userMessage(error);
        return;
      }
    }
    await this.refresh();
    // The pressed button is gone: keep the keyboard in the panel.
    (this.list.querySelector("button") || this.heading).focus();
  }
}

/** When and where a preference was noted: "Noted 3/5/2025, 10:02 in conversation abc12". */
function provenance(updatedAt, threadId, verifiedBy) {
  const when = updatedAt ? new Date(updatedAt) : null;
  const parts = ["Noted"];
  if (when && !Number.isNaN(when.getTime())) parts.push(when.toLocaleString());
  const [subject, session] = String(threadId || "").split(":");
  if (verifiedBy === "code") parts.push("in a guest conversation, verified by an emailed code");
  else if (session) parts.push(`in conversation ${session}`);
  else if (subject) parts.push("in an earlier conversation");
  return parts.join(" ");
}
