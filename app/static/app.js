// The chat page: sign-in, threads, sending, streaming, confirmations, edits, memory, debug.

import { Api, ApiError, userMessage } from "./api.js";
import { claimsOf, embeddedToken, forgetToken, showSignIn, storedName, storedToken, storeToken } from "./auth.js";
import { ChatView } from "./chat.js";
import { CodePrompt } from "./code.js";
import { DebugDrawer } from "./debug.js";
import { DeleteControl } from "./delete.js";
import { newId } from "./dom.js";
import { isNew, ThreadEvents } from "./events.js";
import { MemoryPanel } from "./memory.js";
import { ThreadList, UNTITLED } from "./threads.js";
import { addToolLabels } from "./tools.js";

const THREAD_KEY = "cs-agent.thread";
const BUSY = "Another reply is in progress. Please wait for it to finish, then try again.";
const DROPPED = "The connection was lost before the reply finished.";
const FAILED = "Something went wrong while answering. The conversation is safe; please retry.";
const RECONNECTING = "Connection lost. Reconnecting…";

const $ = (id) => document.getElementById(id);

class ChatApp {
  constructor() {
    this.api = new Api({ onUnauthorized: () => this.signOut("Your session has ended. Please sign in again.") });
    this.threadId = null;
    // While a reply streams (or a rewind runs): {controller, streaming, cursor, stopping}.
    this.running = null;
    this.events = null; // the open thread's own stream: the person who takes it over, live
    this.staffSaid = new Map();
    this.els = {
      app: $("app"),
      signin: $("signin"),
      banner: $("demo-banner"),
      demoNote: $("demo-model-note"),
      title: $("thread-title"),
      input: $("composer-input"),
      send: $("send"),
      stop: $("stop"),
      reconnecting: $("reconnecting"),
      composer: $("composer"),
      identity: $("identity"),
      sidebar: $("sidebar"),
      backdrop: $("backdrop"),
      toggleSidebar: $("toggle-sidebar"),
    };
    this.view = new ChatView($("messages"), $("typing"), {
      onEdit: (messageId, text) => this.editAndRegenerate(messageId, text),
      onDecision: (decision) => this.decide(decision),
    });
    this.threads = new ThreadList($("thread-list"), $("more-threads"), {
      onSelect: (id) => this.selectThread(id),
    });
    this.debug = new DebugDrawer($("debug"), $("toggle-debug"), {
      api: this.api,
      threadId: () => this.threadId,
      onRewind: (checkpointId) => this.rewindTo(checkpointId),
    });
    this.deleteControl = new DeleteControl($("delete-thread"), $("delete-confirm"), {
      onDelete: () => this.deleteThread(),
    });
    this.memory = new MemoryPanel($("memory"), { api: this.api });
    this.codePrompt = new CodePrompt($("messages"), {
      api: this.api,
      banner: this.els.banner,
      slot: $("dev-code"),
      onCode: (code) => this.submitCode(code),
      onBanner: () => this.showBanner(),
    });
    this.role = null;
    this.demoModel = false;
    this.wire();
  }

  wire() {
    const { input, composer, toggleSidebar, backdrop } = this.els;
    composer.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.submit();
      }
    });
    input.addEventListener("input", () => this.autosize());
    this.els.stop.addEventListener("click", () => this.stop());
    $("new-thread").addEventListener("click", () => this.newThread());
    $("sign-out").addEventListener("click", () => this.signOut());
    toggleSidebar.addEventListener("click", () => this.showSidebar(!document.body.classList.contains("sidebar-open")));
    backdrop.addEventListener("click", () => this.showSidebar(false));
    document.addEventListener("keydown", (event) => {
      if (event.key !== "Escape" || event.defaultPrevented || event.isComposing) return;
      if (document.body.classList.contains("sidebar-open")) this.showSidebar(false);
      else if (!event.target.closest?.(".edit-form, .inline-confirm, .debug")) this.stop();
    });
    // An embedding site may hand over a (new) token later by changing the fragment.
    window.addEventListener("hashchange", () => {
      const token = embeddedToken();
      if (token && token !== this.api.token) {
        this.stopStream();
        sessionStorage.removeItem(THREAD_KEY);
        storeToken(token, "");
        this.enter(token);
      }
    });
  }

  autosize() {
    const { input } = this.els;
    input.style.height = "auto";
    input.style.height = `${Math.min(input.scrollHeight, 200)}px`;
  }

  showSidebar(open) {
    document.body.classList.toggle("sidebar-open", open);
    this.els.toggleSidebar.setAttribute("aria-expanded", String(open));
    this.els.backdrop.hidden = !open;
    if (open) this.els.sidebar.querySelector("button")?.focus();
  }

  // --- start and sign-in ----------------------------------------------------------------

  async start() {
    this.api.toolLabels().then((got) => addToolLabels(got?.labels), () => {});
    this.api.ready().then(
      (ready) => {
        this.demoModel = ready?.model === "demo";
        this.showBanner();
      },
      () => {},
    );
    const handed = embeddedToken();
    if (handed) storeToken(handed, "");
    const token = storedToken();
    if (token) await this.enter(token);
    else await this.signIn();
  }

  /** The banner: the demo model's note, and (dev) a guest's emailed code. */
  showBanner() {
    this.els.demoNote.hidden = !this.demoModel;
    this.els.banner.hidden = !this.demoModel && $("dev-code").hidden;
  }

  async signIn(message = "") {
    this.els.app.hidden = true;
    this.els.signin.hidden = false;
    const { token, name } = await showSignIn(this.els.signin, this.api, message);
    storeToken(token, name);
    await this.enter(token);
  }

  async enter(token) {
    this.api.token = token;
    const claims = claimsOf(token);
    const name = storedName() || claims.sub || "";
    this.role = claims.role;
    this.els.identity.textContent = claims.role === "guest" ? "Signed in as a guest" : `Signed in as ${name}`;
    this.els.signin.hidden = true;
    this.els.app.hidden = false;
    this.setComposerEnabled(false); // until the conversation to continue is on screen
    this.memory.setEnabled(claims.role === "customer");
    try {
      await this.threads.load(this.api);
    } catch (error) {
      this.noticeFor(error, { retry: () => this.enter(token) }); // 401: onUnauthorized has taken over
      return;
    }
    const stored = sessionStorage.getItem(THREAD_KEY);
    if (stored) await this.selectThread(stored);
    else this.showNewThread();
    this.setComposerEnabled(true);
    this.els.input.focus({ preventScroll: true });
  }

  setComposerEnabled(enabled) {
    this.els.input.disabled = !enabled;
    this.els.send.disabled = !enabled || Boolean(this.running);
  }

  signOut(message = "") {
    this.stopStream();
    this.watch(null);
    forgetToken();
    sessionStorage.removeItem(THREAD_KEY);
    this.api.token = null;
    this.threadId = null;
    this.role = null;
    this.codePrompt.update(null, null);
    this.view.reset();
    this.debug.close();
    this.memory.setEnabled(false);
    this.deleteControl.setThread(null);
    this.signIn(message);
  }

  // --- threads --------------------------------------------------------------------------

  setThread(id) {
    if (id !== this.threadId || !this.events) this.watch(id);
    this.threadId = id;
    if (id) sessionStorage.setItem(THREAD_KEY, id);
    else sessionStorage.removeItem(THREAD_KEY);
    this.threads.setActive(id);
    this.deleteControl.setThread(id);
    this.els.title.textContent = id ? this.threads.title(id) : UNTITLED;
  }

  /** Follow the thread's own stream: messages from a person, and who answers. */
  watch(id) {
    this.events?.stop();
    this.events = null;
    this.staffSaid = new Map(); // what the stream brought, to keep over a reload racing it
    if (!id) return;
    const path = `/threads/${encodeURIComponent(id)}/events`;
    this.events = new ThreadEvents(this.api, path, {
      onEvent: (event) => {
        if (this.threadId === id) this.threadEvent(event);
      },
    }).start();
  }

  threadEvent({ type, data, openedAt }) {
    if (type === "message" && data?.author === "staff") {
      this.staffSaid.set(data.id, data);
      this.showStaff(data);
    } else if (type === "control" && isNew(data, openedAt)) {
      const name = data.assignee_name || data.assignee;
      if (data.state === "human" && this.view.person !== name) this.view.personJoined(name);
      else if (data.state === "agent" && this.view.person) this.view.backWithAssistant();
    }
  }

  showStaff(message) {
    if (this.view.hasMessage(message.id)) return;
    if (this.view.person !== message.name) this.view.personJoined(message.name);
    this.view.addStaff(message);
  }

  showNewThread() {
    this.stopStream();
    this.setThread(null);
    this.view.showEmpty();
    this.codePrompt.update(null, this.role);
    this.debug.refresh();
  }

  newThread() {
    this.showNewThread();
    this.showSidebar(false);
    this.els.input.focus();
  }

  async selectThread(id) {
    this.stopStream();
    this.setThread(id);
    this.showSidebar(false);
    await this.reload();
    this.debug.refresh();
  }

  /** Show the current thread as the server has it. */
  async reload() {
    const id = this.threadId;
    if (!id) {
      this.view.showEmpty();
      return null;
    }
    try {
      const state = await this.api.state(id);
      if (id !== this.threadId) return null;
      this.view.renderState(state);
      // A message the stream showed while this state was read is not lost.
      for (const message of this.staffSaid.values()) this.showStaff(message);
      this.codePrompt.update(state, this.role, id);
      return state;
    } catch (error) {
      if (id !== this.threadId || error.status === 401) return null;
      if (error.status === 404) {
        this.showNewThread();
        this.view.notice("That conversation no longer exists.", { kind: "info" });
        return null;
      }
      this.noticeFor(error, { retry: () => this.reload() });
      return null;
    }
  }

  /** Delete the thread on screen; true once it is gone (then a new conversation shows). */
  async deleteThread() {
    const id = this.threadId;
    if (!id) return false;
    if (this.running) {
      this.view.notice(BUSY, { kind: "info" });
      return false;
    }
    try {
      await this.api.deleteThread(id);
    } catch (error) {
      if (error.status === 401) return false;
      if (error.status !== 404) {
        // (404: it is gone already, which is what was asked.)
        this.noticeFor(error);
        return false;
      }
    }
    this.threads.remove(id);
    if (this.threadId === id) this.showNewThread();
    this.els.input.focus({ preventScroll: true });
    return true;
  }

  async refreshThreads() {
    try {
      await this.threads.load(this.api);
      this.threads.setActive(this.threadId);
      if (this.threadId) this.els.title.textContent = this.threads.title(this.threadId);
    } catch {
      /* the list is a convenience; the conversation still works */
    }
  }

  // --- sending and streaming ------------------------------------------------------------

  /** The code from the code prompt goes to the agent as the guest's next message. */
  submitCode(code) {
    if (this.running) {
      this.view.notice(BUSY, { kind: "info" });
      return;
    }
    this.send(code);
  }

  submit() {
    const text = this.els.input.value;
    if (!text.trim()) return;
    if (this.running) {
      this.view.notice(BUSY, { kind: "info" });
      return;
    }
    this.els.input.value = "";
    this.autosize();
    this.send(text);
  }

  async send(text, run = this.beginRun()) {
    this.view.clearNotices();
    if (!this.threadId) {
      try {
        const created = await this.api.createThread();
        if (this.running !== run) return;
        this.setThread(created.id);
        this.refreshThreads(); // the new conversation shows in the sidebar at once
      } catch (error) {
        this.finishRun(run);
        this.restoreDraft(text);
        this.noticeFor(error);
        return;
      }
    }
    const threadId = this.threadId;
    const clientMessageId = newId();
    const bubble = this.view.addUser(text);
    await this.runStream(
      run,
      (signal, cursor) => this.api.sendMessage(threadId, text, clientMessageId, { signal, cursor }),
      { draft: text, bubble },
    );
  }

  decide(decision) {
    if (this.running) {
      this.view.notice(BUSY, { kind: "info" });
      return;
    }
    const threadId = this.threadId;
    const run = this.beginRun();
    this.runStream(run, (signal, cursor) => this.api.resume(threadId, decision, { signal, cursor }), {});
  }

  restoreDraft(text) {
    if (!this.els.input.value.trim()) {
      this.els.input.value = text;
      this.autosize();
    }
  }

  /** From now until finishRun, the page is busy with one reply (or rewind). */
  beginRun() {
    const run = { controller: new AbortController(), streaming: false, cursor: null, stopping: false, cancelSent: false };
    this.running = run;
    this.view.setBusy(true);
    this.els.send.disabled = true;
    return run;
  }

  finishRun(run) {
    if (this.running !== run) return;
    this.running = null;
    this.view.setBusy(false);
    this.setReconnecting(false);
    this.showStop(null);
    this.els.send.disabled = this.els.input.disabled;
  }

  /** While a reply streams, Stop takes the place of Send. */
  showStop(run) {
    const { send, stop } = this.els;
    const shown = Boolean(run?.streaming);
    const hadFocus = document.activeElement === stop;
    stop.hidden = !shown;
    send.hidden = shown;
    stop.disabled = Boolean(run?.stopping);
    stop.textContent = run?.stopping ? "Stopping…" : "Stop";
    if (hadFocus && !shown) this.els.input.focus({ preventScroll: true });
  }

  setReconnecting(on) {
    this.setStatus(on ? RECONNECTING : "");
  }

  /** The line under the conversation about the reply's connection ("" hides it). */
  setStatus(text) {
    const el = this.els.reconnecting;
    if (el.textContent !== text) el.textContent = text;
  }

  /** Stop the reply on the server: it ends with `done` "cancelled", the answer so far kept. */
  stop() {
    const run = this.running;
    if (!run?.streaming || run.stopping) return;
    run.stopping = true;
    this.showStop(run);
    if (run.cursor.location) this.cancel(run);
    // Otherwise the run is not named yet: cancelled as soon as it is (runStream).
  }

  async cancel(run) {
    run.cancelSent = true;
    try {
      await this.api.cancelRun(run.cursor.location);
    } catch (error) {
      if (this.running !== run || error.status === 401) return;
      if (error.status === 409) return; // it has just finished: its `done` is on the way
      run.stopping = false;
      run.cancelSent = false;
      this.showStop(run);
      // On the status line, not in the conversation, where the answer is still streaming.
      this.setStatus(`The reply could not be stopped. ${userMessage(error)}`);
    }
  }

  /** Stop following the current reply (it goes on on the server, and shows on reload). */
  stopStream() {
    const run = this.running;
    if (!run) return;
    run.controller.abort();
    this.finishRun(run);
  }

  /**
   * Stream one reply into the view; then show the thread as the server has it. `open(signal,
   * cursor)` gives the run's events as Api.follow does (reconnecting by itself); `mark` is the
   * element the run's output follows (for Retry to show it again from the start).
   */
  async runStream(run, open, { draft = null, bubble = null, mark = this.view.mark() }) {
    let done = null;
    let failure = null;
    run.cursor ??= { location: null, lastId: 0 };
    run.streaming = true;
    this.showStop(run);
    const retry = () => this.retry(draft, { cursor: run.cursor, mark });
    try {
      for await (const { type, data } of open(run.controller.signal, run.cursor)) {
        if (this.running !== run) return;
        if (type === "reconnecting") {
          this.setReconnecting(true);
          continue;
        }
        this.setReconnecting(false);
        if (run.stopping && run.cursor.location && !run.cancelSent) this.cancel(run);
        if (type === "token") this.view.token(data?.text || "");
        else if (type === "tool_call") this.view.toolCall(data);
        else if (type === "tool_result") this.view.toolResult(data);
        else if (type === "interrupt") this.view.interrupt(data);
        else if (type === "citations") this.view.citations(data?.citations);
        else if (type === "stored") this.view.markSent(bubble, data?.message);
        else if (type === "error") failure = data?.message || FAILED;
        else if (type === "done") {
          done = data;
          this.view.endBubble(); // the answer as streamed, until the thread is loaded again
        }
      }
    } catch (error) {
      if (error?.name === "AbortError" || this.running !== run) return;
      this.finishRun(run);
      this.showRequestError(error, draft, bubble, retry);
      return;
    }
    if (this.running !== run) return;
    if (!done) {
      this.finishRun(run);
      this.view.notice(DROPPED, { retry });
      return;
    }
    if (done.status === "handed_off") {
      // Stored for the person holding the conversation: no answer to show, and what the
      // thread's stream has put on screen stays.
      this.finishRun(run);
      this.refreshThreads();
      this.els.input.focus({ preventScroll: true });
      return;
    }
    await this.reload();
    if (this.running !== run) return;
    if (failure || done.status === "failed") this.view.notice(failure || FAILED);
    this.finishRun(run);
    this.refreshThreads();
    this.debug.refresh();
    this.memory.refresh(); // the answer may have noted a preference
    if (done.status === "interrupted") this.view.focusDecision();
    else if (!this.codePrompt.focus()) this.els.input.focus({ preventScroll: true });
  }

  showRequestError(error, draft, bubble, retry = () => this.retry(draft)) {
    if (!(error instanceof ApiError)) {
      this.view.notice(DROPPED, { retry });
      return;
    }
    if (error.status === 401) return;
    if (error.code === "thread_busy") {
      // The message was not accepted: take it back out of the list, into the composer.
      bubble?.remove();
      if (draft) this.restoreDraft(draft);
      this.view.notice(BUSY, { kind: "info", retry: () => this.reload() });
    } else if (error.status === 0) {
      this.view.notice(userMessage(error), { retry });
    } else if (error.code === "nothing_pending") {
      this.reload().then(() => this.view.notice("There is no change waiting for confirmation any more.", { kind: "info" }));
    } else {
      this.view.notice(userMessage(error), { retry: () => this.reload() });
    }
  }

  /** An API failure as a notice: none for 401 (sign-in takes over), BUSY for a busy thread. */
  noticeFor(error, opts = {}) {
    if (error?.status === 401) return;
    if (error?.code === "thread_busy") this.view.notice(BUSY, { ...opts, kind: "info" });
    else this.view.notice(userMessage(error), opts);
  }

  /**
   * After a dropped connection: if the thread's latest run is still going, follow it again
   * (from the last event seen when it is the run this page followed, else from its start,
   * in place of what it had shown); if not, show what the server has and offer the unsent
   * text again. `previous`: {cursor, mark} of the run that was being followed.
   */
  async retry(draft, previous = null) {
    const threadId = this.threadId;
    if (threadId && !this.running) {
      const run = this.beginRun();
      let latest = null;
      try {
        latest = await this.api.latestRun(threadId);
      } catch (error) {
        this.finishRun(run);
        if (this.threadId === threadId) this.noticeFor(error, { retry: () => this.retry(draft, previous) });
        return;
      }
      if (this.running !== run) return;
      if (latest?.status === "running") {
        const location = Api.runLocation(threadId, latest.run_id);
        const known = previous?.cursor?.location?.endsWith(`/runs/${latest.run_id}`);
        const mark = previous?.mark ?? null;
        if (known) {
          run.cursor = { location: previous.cursor.location, lastId: previous.cursor.lastId };
          this.view.reopenBubble();
        } else {
          run.cursor = { location, lastId: 0 };
          if (!this.view.truncateAfter(mark)) {
            // Nothing on screen to replace: the thread as stored, then the run from its start.
            await this.reload();
            if (this.running !== run) return;
          }
        }
        await this.runStream(run, (signal, cursor) => this.api.followRun({ signal, cursor }), {
          draft,
          mark: mark?.isConnected ? mark : this.view.mark(),
        });
        return;
      }
      this.finishRun(run);
    } else if (this.running) {
      this.view.notice(BUSY, { kind: "info" });
      return;
    }
    const state = await this.reload();
    if (!state || !draft) return;
    const users = state.messages.filter((m) => m.role === "user");
    if (users.at(-1)?.content !== draft) this.restoreDraft(draft);
  }

  // --- rewinding ------------------------------------------------------------------------

  async editAndRegenerate(messageId, text) {
    if (this.running) {
      this.view.notice(BUSY, { kind: "info" });
      return;
    }
    const run = this.beginRun();
    try {
      const state = await this.api.rewind(this.threadId, { message_id: messageId });
      if (this.running !== run) return;
      this.view.renderState(state);
    } catch (error) {
      this.finishRun(run);
      this.noticeFor(error);
      return;
    }
    await this.send(text, run);
  }

  async rewindTo(checkpointId) {
    if (this.running) {
      this.view.notice(BUSY, { kind: "info" });
      return;
    }
    const run = this.beginRun();
    try {
      const state = await this.api.rewind(this.threadId, { checkpoint_id: checkpointId });
      if (this.running !== run) return;
      this.view.renderState(state);
    } catch (error) {
      this.noticeFor(error);
    } finally {
      this.finishRun(run);
    }
    this.refreshThreads();
    this.debug.refresh();
  }
}

new ChatApp().start();
