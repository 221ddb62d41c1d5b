// "Delete conversation" for the thread on screen, confirmed in a small bar under the header
// (not window.confirm: it blocks the page, and embedding sites may suppress it).

import { clear, h } from "./dom.js";

const QUESTION = "Delete this conversation? This cannot be undone.";

export class DeleteControl {
  /**
   * button: the header's Delete button; bar: the element the confirm step shows in.
   * onDelete(): Promise<boolean>, true once the thread is gone (the caller then moves on).
   */
  constructor(button, bar, { onDelete }) {
    this.button = button;
    this.bar = bar;
    this.onDelete = onDelete;
    this.yes = h(
      "button",
      { type: "button", class: "danger", dataset: { testid: "delete-confirm-yes" }, onclick: () => this.confirm() },
      "Delete",
    );
    this.no = h(
      "button",
      { type: "button", dataset: { testid: "delete-cancel" }, onclick: () => this.cancel() },
      "Cancel",
    );
    clear(bar).append(
      h("span", { id: "delete-confirm-text", class: "inline-confirm-text" }, QUESTION),
      h("div", { class: "row" }, this.yes, this.no),
    );
    bar.setAttribute("aria-labelledby", "delete-confirm-text");
    button.addEventListener("click", () => (this.isOpen ? this.cancel() : this.open()));
    bar.addEventListener("keydown", (event) => {
      if (event.key !== "Escape") return;
      event.stopPropagation(); // Escape here cancels; it does not also close a drawer
      this.cancel();
    });
  }

  get isOpen() {
    return !this.bar.hidden;
  }

  /** The thread on screen changed (null: none yet, so nothing to delete). */
  setThread(id) {
    this.close();
    this.button.hidden = !id;
  }

  open() {
    this.bar.hidden = false;
    this.button.setAttribute("aria-expanded", "true");
    this.no.focus(); // the safe choice under the keyboard
  }

  close() {
    this.bar.hidden = true;
    this.button.setAttribute("aria-expanded", "false");
    this.yes.disabled = false;
    this.no.disabled = false;
    this.yes.textContent = "Delete";
  }

  cancel() {
    this.close();
    this.button.focus();
  }

  async confirm() {
    this.yes.disabled = true;
    this.no.disabled = true;
    this.yes.textContent = "Deleting …";
    const deleted = await this.onDelete();
    if (!deleted) this.cancel();
  }
}
