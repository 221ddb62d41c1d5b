// The conversation open in the console: its transcript, live through the thread's stream;
// accept or take over, reply, transfer, hand back with a note.

import { userMessage } from "./api.js";
import { h, newId } from "./dom.js";
import { renderHistory, Transcript } from "./console-transcript.js";
import { ThreadEvents } from "./events.js";

export const CONFLICT = "Someone else changed this conversation; reloaded.";
const STATE_TEXT = { agent: "With the assistant", queued: "Waiting for a person", human: "Held by" };

const $ = (id) => document.getElementById(id);

export class Conversation {
  /** me(): the signed-in staff id; onChange(): the queue may have changed; onStatus(text, kind). */
  constructor({ api, me, onChange, onStatus }) {
    this.api = api;
    this.me = me;
    this.onChange = onChange;
    this.onStatus = onStatus;
    this.threadId = null;
    this.control = null;
    this.messageCount = 0;
    this.events = null;
    this.els = {
      panel: $("conversation"),
      title: $("conversation-title"),
      state: $("control-state"),
      handoff: $("handoff"),
      accept: $("accept"),
      takeOver: $("take-over"),
      transferForm: $("transfer-form"),
      transferTo: $("transfer-to"),
      releaseForm: $("release-form"),
      releaseNote: $("release-note"),
      replyForm: $("reply-form"),
      reply: $("reply-input"),
      history: $("history"),
    };
    this.transcript = new Transcript($("transcript"));
    this.wire();
  }

  wire() {
    const { accept, takeOver, transferForm, transferTo, releaseForm, releaseNote, replyForm, reply } = this.els;
    accept.addEventListener("click", () => this.act("accept"));
    takeOver.addEventListener("click", () => this.act("take_over"));
    transferForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const to = transferTo.value.trim();
      if (!to.startsWith("staff-")) {
        this.onStatus("A transfer goes to a staff id (staff-…).", "error");
        return;
      }
      this.act("transfer", { to }).then((ok) => ok && (transferTo.value = ""));
    });
    releaseForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const note = releaseNote.value.trim();
      this.act("release", note ? { note } : {}).then((ok) => ok && (releaseNote.value = ""));
    });
    replyForm.addEventListener("submit", (event) => {
      event.preventDefault();
      this.say();
    });
    reply.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.say();
      }
    });
  }

  async open(threadId) {
    this.close();
    this.threadId = threadId;
    this.els.panel.hidden = false;
    await this.reload();
    if (this.threadId !== threadId) return;
    const path = `/staff/threads/${encodeURIComponent(threadId)}/events`;
    this.events = new ThreadEvents(this.api, path, {
      onEvent: (event) => {
        if (this.threadId === threadId) this.streamed(event);
      },
      onStatus: (status) => {
        if (this.threadId === threadId) this.els.panel.dataset.stream = status;
      },
    }).start();
  }

  close() {
    this.events?.stop();
    this.events = null;
    this.threadId = null;
    this.control = null;
    this.els.panel.hidden = true;
  }

  /** Show the thread as the server has it. */
  async reload() {
    const id = this.threadId;
    if (!id) return;
    let thread;
    try {
      thread = await this.api.staffThread(id);
    } catch (error) {
      if (id !== this.threadId || error?.status === 401) return;
      this.onStatus(userMessage(error), "error");
      if (!this.control) this.els.panel.hidden = true; // nothing to show: say, no such thread
      return;
    }
    if (id !== this.threadId) return;
    this.messageCount = thread.messages.length;
    this.transcript.render(thread.messages, thread.pending);
    renderHistory(this.els.history, thread.control_history);
    const channel = thread.channel ? ` · ${thread.channel.name}` : "";
    this.els.title.textContent = `${thread.customer} · ${thread.id}${channel}`;
    if (/^https?:\/\//.test(thread.channel?.link || "")) {
      // the Chatwoot conversation, where its people answer (docs/channels.md)
      const link = h("a", { href: thread.channel.link, target: "_blank", rel: "noopener" }, "open in Chatwoot");
      this.els.title.append(" · ", link);
    }
    this.showControl(thread.control);
  }

  /** While the assistant answers, nothing comes on the thread's stream: look now and then. */
  async refreshIfAgent() {
    if (!this.threadId || this.control?.state !== "agent") return;
    const id = this.threadId;
    try {
      const thread = await this.api.staffThread(id);
      if (id === this.threadId && thread.messages.length !== this.messageCount) await this.reload();
    } catch {
      /* the next tick tries again */
    }
  }

  streamed({ type, data }) {
    if (type === "message") this.transcript.add({ ...data, role: data.author === "customer" ? "user" : "assistant" });
    else if (type === "control" && data.version > (this.control?.version ?? -1)) {
      this.reload();
      this.onChange();
    }
  }

  showControl(control) {
    this.control = control;
    const { state, accept, takeOver, transferForm, releaseForm, replyForm, handoff } = this.els;
    const mine = control.state === "human" && control.assignee === this.me();
    const holder = control.assignee_name || control.assignee;
    state.hidden = false;
    state.dataset.state = control.state;
    state.textContent = control.state === "human" ? `${STATE_TEXT.human} ${holder}` : STATE_TEXT[control.state];
    accept.hidden = control.state !== "queued";
    takeOver.hidden = control.state !== "agent";
    transferForm.hidden = !mine;
    releaseForm.hidden = !mine;
    replyForm.hidden = !mine;
    handoff.hidden = !control.summary;
    handoff.textContent = control.summary ? `Handoff summary: ${control.summary}${control.reason ? ` (${control.reason})` : ""}` : "";
  }

  /** One change of control; a conflict reloads the thread. True when it was made. */
  async act(action, extra = {}) {
    const id = this.threadId;
    if (!id || !this.control) return false;
    try {
      const control = await this.api.staffControl(id, action, this.control.version, extra);
      if (id !== this.threadId) return true;
      this.onStatus("");
      if (control.version > this.control.version) await this.reload();
      this.onChange();
      if (action === "accept" || action === "take_over") this.els.reply.focus();
      return true;
    } catch (error) {
      if (error?.status === 401) return false;
      if (error?.code === "control_conflict") {
        await this.reload();
        this.onStatus(CONFLICT, "info");
        this.onChange();
      } else {
        this.onStatus(userMessage(error), "error");
      }
      return false;
    }
  }

  async say() {
    const { reply } = this.els;
    const content = reply.value.trim();
    const id = this.threadId;
    if (!content || !id) return;
    reply.value = "";
    try {
      const message = await this.api.staffSay(id, content, newId());
      if (id === this.threadId) this.transcript.add({ ...message, role: "assistant" });
    } catch (error) {
      if (!reply.value) reply.value = content;
      if (error?.status === 401) return;
      if (error?.code === "control_conflict") {
        await this.reload();
        this.onStatus(CONFLICT, "info");
      } else {
        this.onStatus(userMessage(error), "error");
      }
    }
  }
}
