// A guest proves who they are with the one-time code emailed to the account: the code
// prompt below the conversation while one is awaited, and (dev only) the code itself in the
// banner, read from the outbox, since no email is really sent there.

import { h } from "./dom.js";

const LOOKUPS = new Set(["find_user_id_by_email", "find_user_id_by_name_zip"]);
const CODE_SENT = /^Verification started/;
const WRONG_CODE = /^Not verified: that code is not correct; \d+/;
const CODE = /\b(\d{6})\b/;

/** The thread waits for a code: its newest identity result sent one, or refused a wrong
 * one with attempts left, and nobody is verified yet. */
export function awaitingCode(state) {
  if (!state || state.verified_user_id) return false;
  const messages = state.messages || [];
  for (let i = messages.length - 1; i >= 0; i -= 1) {
    const m = messages[i];
    if (m.role !== "tool") continue;
    const text = String(m.content || "");
    if (LOOKUPS.has(m.name)) return CODE_SENT.test(text);
    if (m.name === "confirm_identity") return WRONG_CODE.test(text);
  }
  return false;
}

export class CodePrompt {
  /**
   * log: the message list the prompt goes at the end of; onCode(code) sends it.
   * banner + slot: the dev banner and its code line; api: for the dev outbox.
   */
  constructor(log, { onCode, api, banner, slot, onBanner }) {
    this.log = log;
    this.onCode = onCode;
    this.api = api;
    this.banner = banner;
    this.slot = slot;
    this.onBanner = onBanner;
    this.form = null;
    this.outboxAvailable = true; // false once the server says it has none (not dev)
  }

  /** Show or remove the prompt for this thread's state (guests only). */
  update(state, role, threadId) {
    this.remove();
    const waiting = role === "guest" && awaitingCode(state);
    if (!waiting) {
      this.showDevCode(null);
      return;
    }
    this.form = this.build();
    this.log.append(this.form);
    this.form.scrollIntoView({ block: "nearest" });
    this.loadDevCode(threadId);
  }

  remove() {
    this.form?.remove();
    this.form = null;
  }

  /** Put the keyboard in the code box when the prompt is showing; true if it did. */
  focus() {
    const input = this.form?.querySelector("input");
    if (!input) return false;
    input.focus({ preventScroll: true });
    return true;
  }

  build() {
    const input = h("input", {
      id: "code-input",
      class: "code-input",
      type: "text",
      inputmode: "numeric",
      autocomplete: "one-time-code",
      maxlength: 7,
      required: true,
      "aria-describedby": "code-help",
      dataset: { testid: "code-input" },
    });
    const error = h("p", { class: "code-error", role: "alert", dataset: { testid: "code-error" } });
    const form = h(
      "form",
      {
        class: "code-prompt",
        dataset: { testid: "code-prompt" },
        "aria-labelledby": "code-title",
        onsubmit: (event) => {
          event.preventDefault();
          const code = input.value.replace(/[\s-]/g, "");
          if (!/^\d{6}$/.test(code)) {
            error.textContent = "The code has 6 digits.";
            input.focus();
            return;
          }
          this.remove();
          this.onCode(code);
        },
      },
      h("h2", { id: "code-title", class: "code-title" }, "Enter the code we emailed you"),
      h(
        "p",
        { id: "code-help", class: "muted" },
        "We sent a 6-digit code to the email address on the account. It is valid for 10 minutes.",
      ),
      h(
        "div",
        { class: "row" },
        h("label", { for: "code-input", class: "sr-only" }, "Verification code"),
        input,
        h("button", { type: "submit", class: "primary", dataset: { testid: "code-submit" } }, "Verify"),
      ),
      error,
    );
    return form;
  }

  async loadDevCode(threadId) {
    if (!this.outboxAvailable) return;
    let messages;
    try {
      messages = await this.api.outbox();
    } catch (error) {
      if (error.status === 404) this.outboxAvailable = false;
      return;
    }
    // A lookup that matched nobody sent nothing: then there is no code to show.
    const newest = (messages || []).find((m) => m.session_id === threadId);
    const code = newest && CODE.exec(String(newest.body || ""));
    this.showDevCode(code ? { code: code[1], to: String(newest.recipient || "") } : null);
  }

  showDevCode(found) {
    this.slot.textContent = found ? `Dev outbox: the code emailed to ${found.to} is ${found.code}` : "";
    this.slot.hidden = !found;
    this.onBanner();
  }
}
