// The console's policies page (issue 42): versions with state and share, a diff between
// two, "Test" (a task file) and "Publish to N%", "Roll back", and an editor for a new draft.
// Staff read; the buttons that change anything are for admins (the server checks anyway).
// Signed in with the console's own staff session (this tab's sessionStorage).

import { Api, userMessage } from "./api.js";
import { claimsOf } from "./auth.js";
import { h } from "./dom.js";

const TOKEN_KEY = "cs-agent.staff-token"; // the console's
const STAFF_ROLES = ["staff", "admin"];
const POLL_MS = 2000;

const $ = (id) => document.getElementById(id);

/** Lines of `a` and `b` as [" ", "-", "+"] with the text: a longest-common-subsequence diff. */
export function lineDiff(a, b) {
  const x = a.split("\n");
  const y = b.split("\n");
  const n = x.length;
  const m = y.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) {
      out.push([" ", x[i++]]);
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push(["-", x[i++]]);
    else out.push(["+", y[j++]]);
  }
  while (i < n) out.push(["-", x[i++]]);
  while (j < m) out.push(["+", y[j++]]);
  return out;
}

/** A version as the text the diff compares: its note, procedures and instructions. */
function asText(v) {
  const procedures = (v.procedures || []).map((p) => `### ${p.name}\nWhen: ${p.when}\n${p.steps}`);
  return [`note: ${v.note}`, ...procedures, "---", v.instructions].join("\n");
}

class PoliciesPage {
  constructor() {
    this.api = new Api({ onUnauthorized: () => this.say("Your session has ended. Sign in on the console again.", "error") });
    this.versions = [];
    this.full = new Map(); // version -> the version with its instructions
    this.selected = null; // the version the test and publish panels act on
    $("diff-a").addEventListener("change", () => this.showDiff());
    $("diff-b").addEventListener("change", () => this.showDiff());
    $("draft-parent").addEventListener("change", () => this.fillEditor());
    $("draft-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.createDraft();
    });
    $("test-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.startTest();
    });
    $("publish-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.publish();
    });
    $("rollback").addEventListener("click", () => this.rollback());
  }

  start() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const claims = token ? claimsOf(token) : {};
    if (!STAFF_ROLES.includes(claims.role)) {
      this.say("Sign in on the console first; this page uses its session.", "error", true);
      return;
    }
    this.api.token = token;
    this.admin = claims.role === "admin";
    $("identity").textContent = `Signed in as ${claims.name || claims.sub}${this.admin ? " (admin)" : ""}`;
    for (const el of document.querySelectorAll(".admin-only")) if (!this.admin) el.remove();
    this.load();
  }

  say(text, kind = "info", signIn = false) {
    const el = $("status");
    el.replaceChildren(text, signIn ? h("a", { href: "/console", class: "status-link" }, "Open the console") : "");
    el.dataset.kind = kind;
    el.hidden = !text;
  }

  async version(number) {
    if (!this.full.has(number)) this.full.set(number, await this.api.get(`/staff/policies/${number}`));
    return this.full.get(number);
  }

  async load() {
    try {
      this.versions = (await this.api.get("/staff/policies")).items;
    } catch (error) {
      this.say(error?.status === 404 ? "That is not a staff session." : userMessage(error), "error", error?.status === 404);
      return;
    }
    $("policies").hidden = false;
    $("versions").replaceChildren(...this.versions.map((v) => this.row(v)));
    const live = this.versions.find((v) => v.state === "live") || this.versions[0];
    const newest = this.versions[this.versions.length - 1];
    for (const [id, pick] of [["diff-a", live], ["diff-b", newest], ["draft-parent", live]]) {
      const select = $(id);
      if (!select) continue;
      const keep = select.value;
      select.replaceChildren(...this.versions.map((v) => h("option", { value: v.version }, `${v.version} (${v.state})`)));
      select.value = keep && this.versions.some((v) => String(v.version) === keep) ? keep : String(pick.version);
    }
    await this.showDiff();
    if ($("draft-instructions") && !$("draft-instructions").value) await this.fillEditor();
    $("policies").dataset.loaded = String(this.versions.length); // tests wait on it
  }

  row(v) {
    const test = v.latest_test;
    const actions = [];
    if (this.admin && v.state !== "live") {
      actions.push(h("button", { type: "button", dataset: { testid: "test-version" }, onclick: () => this.select(v, "test") }, "Test"));
      actions.push(h("button", { type: "button", dataset: { testid: "publish-version" }, onclick: () => this.select(v, "publish") }, "Publish"));
    }
    return h(
      "tr",
      { dataset: { testid: "version-row", version: v.version, state: v.state } },
      h("td", {}, String(v.version)),
      h("td", { class: `state-${v.state}` }, v.state),
      h("td", {}, v.state === "live" ? "100%" : v.percent ? `${v.percent}%` : "–"),
      h("td", {}, `${new Date(v.created_at).toLocaleString()} · ${v.created_by}`),
      h("td", {}, v.note),
      h("td", { dataset: { testid: "latest-test" } }, test ? test.status : "never tested"),
      h("td", { class: "version-actions" }, actions),
    );
  }

  select(v, panel) {
    this.selected = v.version;
    $("test-version").textContent = $("publish-version").textContent = String(v.version);
    $("test-panel").hidden = panel !== "test";
    $("publish-panel").hidden = panel !== "publish";
    $(panel === "test" ? "test-panel" : "publish-panel").scrollIntoView({ block: "nearest" });
  }

  async showDiff() {
    const [a, b] = [$("diff-a").value, $("diff-b").value];
    if (!a || !b) return;
    const [va, vb] = await Promise.all([this.version(Number(a)), this.version(Number(b))]);
    const lines = lineDiff(asText(va), asText(vb));
    $("diff").replaceChildren(
      ...lines.map(([mark, text]) => h("span", { class: mark === "+" ? "add" : mark === "-" ? "del" : null }, `${mark} ${text}\n`)),
    );
  }

  async fillEditor() {
    const parent = await this.version(Number($("draft-parent").value));
    $("draft-instructions").value = parent.instructions;
    $("draft-procedures").value = JSON.stringify(parent.procedures || [], null, 2);
  }

  async createDraft() {
    let procedures;
    try {
      procedures = JSON.parse($("draft-procedures").value || "[]");
    } catch {
      this.say("The procedures are not valid JSON.", "error");
      return;
    }
    const body = {
      instructions: $("draft-instructions").value,
      procedures,
      note: $("draft-note").value,
      parent: Number($("draft-parent").value),
    };
    try {
      const made = await this.api.post("/staff/policies", body);
      this.say(`Draft version ${made.version} created.`);
      await this.load();
      $("diff-b").value = String(made.version); // what it changes from its parent
      $("diff-a").value = String(body.parent);
      await this.showDiff();
    } catch (error) {
      this.say(userMessage(error), "error");
    }
  }

  async startTest() {
    const file = $("test-file").files[0];
    if (!file) {
      this.say("Choose a task file first.", "error");
      return;
    }
    let tasks;
    try {
      tasks = JSON.parse(await file.text());
    } catch {
      this.say("That task file is not JSON.", "error");
      return;
    }
    const version = this.selected;
    try {
      const test = await this.api.post(`/staff/policies/${version}/tests`, { tasks });
      $("test-result").textContent = `Testing version ${version} against live …`;
      this.poll(version, test.id);
    } catch (error) {
      this.say(userMessage(error), "error");
    }
  }

  async poll(version, id) {
    const test = await this.api.get(`/staff/policies/${version}/tests/${id}`).catch(() => null);
    if (!test || test.status === "running") {
      setTimeout(() => this.poll(version, id), POLL_MS);
      return;
    }
    $("test-result").textContent = `Version ${version}: ${test.status}`;
    $("test-compare").textContent = test.markdown || test.error || "";
    $("test-compare").hidden = !$("test-compare").textContent;
    await this.load();
  }

  async publish() {
    const body = { percent: Number($("publish-percent").value) };
    if ($("publish-force").checked) Object.assign(body, { force: true, reason: $("publish-reason").value });
    try {
      const got = await this.api.post(`/staff/policies/${this.selected}/publish`, body);
      this.say(`Version ${got.version} is ${got.state}${got.percent ? ` for ${got.percent}% of new conversations` : ""}.`);
      $("publish-panel").hidden = true;
      await this.load();
    } catch (error) {
      this.say(userMessage(error), "error");
    }
  }

  async rollback() {
    try {
      const got = await this.api.post("/staff/policies/rollback");
      this.say(`Version ${got.retired} retired; version ${got.live} is live.`);
      await this.load();
    } catch (error) {
      this.say(userMessage(error), "error");
    }
  }
}

new PoliciesPage().start();
