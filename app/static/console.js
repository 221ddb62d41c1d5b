// The staff console: sign in with a staff token (or, in dev, the demo staff sign-in), the
// live queue, and the conversation a person answers in.

import { Api, userMessage } from "./api.js";
import { claimsOf } from "./auth.js";
import { Conversation } from "./console-thread.js";
import { QueueList } from "./console-queue.js";
import { addToolLabels } from "./tools.js";

const TOKEN_KEY = "cs-agent.staff-token";
const NOT_STAFF = "That is not a staff token.";

const $ = (id) => document.getElementById(id);

class ConsoleApp {
  constructor() {
    this.api = new Api({ onUnauthorized: () => this.signOut("Your session has ended. Please sign in again.") });
    this.claims = {};
    this.els = {
      signin: $("signin"),
      app: $("console"),
      status: $("signin-status"),
      token: $("token-input"),
      demoForm: $("demo-form"),
      demoName: $("demo-name"),
      demoId: $("demo-id"),
      identity: $("identity"),
      consoleStatus: $("console-status"),
    };
    this.conversation = new Conversation({
      api: this.api,
      me: () => this.claims.sub,
      onChange: () => this.queue.refresh(),
      onStatus: (text, kind) => this.setStatus(text, kind),
    });
    this.queue = new QueueList($("queue"), document.querySelectorAll(".tabs [data-filter]"), {
      onSelect: (item) => this.openThread(item.thread_id),
      onTick: () => this.conversation.refreshIfAgent(),
    });
    this.api.toolLabels().then((got) => addToolLabels(got?.labels), () => {});
    this.wire();
  }

  wire() {
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const token = this.els.token.value.trim();
      if (token) this.enter(token);
    });
    this.els.demoForm.addEventListener("submit", (event) => {
      event.preventDefault();
      this.demoSignIn();
    });
    $("sign-out").addEventListener("click", () => this.signOut());
    // Any conversation, to join one the assistant is still answering (take over).
    $("open-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const id = $("open-id").value.trim();
      if (id) this.openThread(id);
    });
  }

  start() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) this.enter(token);
    else this.showSignIn();
  }

  /** /console#thread=ID (the analytics page links so) opens that conversation. */
  openFromHash() {
    const threadId = new URLSearchParams(location.hash.slice(1)).get("thread");
    if (threadId) this.openThread(threadId);
  }

  showSignIn(message = "") {
    this.els.app.hidden = true;
    this.els.signin.hidden = false;
    this.els.status.textContent = message;
    // The demo sign-in exists in dev only (404 elsewhere).
    this.api.demoCustomers().then(
      () => {
        this.els.demoForm.hidden = false;
      },
      () => {
        this.els.demoForm.hidden = true;
      },
    );
  }

  async demoSignIn() {
    const name = this.els.demoName.value.trim();
    const userId = this.els.demoId.value.trim();
    this.els.status.textContent = "Signing in …";
    try {
      const { token } = await this.api.demoLogin("staff", userId || null, name || null);
      await this.enter(token);
    } catch (error) {
      this.els.status.textContent = userMessage(error);
    }
  }

  async enter(token) {
    const claims = claimsOf(token);
    if (claims.role !== "staff" && claims.role !== "admin") {
      this.showSignIn(NOT_STAFF);
      return;
    }
    this.api.token = token;
    try {
      await this.api.staffQueue("queued"); // the server's word on the token
    } catch (error) {
      this.api.token = null;
      if (error?.status !== 401) this.showSignIn(error?.status === 404 ? NOT_STAFF : userMessage(error));
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    this.claims = claims;
    this.els.identity.textContent = `Signed in as ${claims.name || claims.sub}`;
    this.els.identity.dataset.staffId = claims.sub;
    this.els.signin.hidden = true;
    this.els.app.hidden = false;
    this.els.status.textContent = "";
    this.queue.start(this.api);
    this.openFromHash();
  }

  signOut(message = "") {
    this.queue.stop();
    this.conversation.close();
    this.api.token = null;
    this.claims = {};
    sessionStorage.removeItem(TOKEN_KEY);
    this.showSignIn(message);
  }

  async openThread(threadId) {
    this.setStatus("");
    this.queue.setActive(threadId);
    await this.conversation.open(threadId);
  }

  /** The line above the conversation ("" hides it). */
  setStatus(text, kind = "info") {
    const el = this.els.consoleStatus;
    el.textContent = text;
    el.dataset.kind = kind;
    el.hidden = !text;
  }
}

new ConsoleApp().start();
