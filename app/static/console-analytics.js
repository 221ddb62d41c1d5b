// The console's analytics page: totals, charts of the summary API's periods, and the
// flagged conversations, each opening in the console's conversation view. Signed in with
// the console's own staff session (this tab's sessionStorage).

import { Api, userMessage } from "./api.js";
import { claimsOf } from "./auth.js";
import { h } from "./dom.js";
import { costChart, daysBetween, ratesChart, resultsChart, toolsChart, ttftChart } from "./console-analytics-charts.js";

const TOKEN_KEY = "cs-agent.staff-token"; // the console's
const FLAGS = [
  "repeated_tool_error", "guard_ended_turn", "declined_write", "customer_repeated",
  "asked_for_human", "late_handoff", "failed_run", "policy_refusal", "slow_answer",
];
const PAGE = 50;

const $ = (id) => document.getElementById(id);
const pct = (v) => `${(v * 100).toFixed(1)}%`;
const usd = (v) => `$${Number(v).toFixed(4)}`;
const minutes = (n) => `${Number(n.toFixed(1))} minute${n === 1 ? "" : "s"}`;
const ms = (v) => (v === null || v === undefined ? "–" : `${Math.round(v)} ms`);

/** Where the console opens a conversation (console.js reads the hash). */
export function transcriptLink(threadId) {
  return `/console#${new URLSearchParams({ thread: threadId })}`;
}

class AnalyticsPage {
  constructor() {
    this.api = new Api({ onUnauthorized: () => this.say("Your session has ended. Sign in on the console again.", "error") });
    this.charts = [];
    this.cursor = null;
    this.summary = null;
    this.range = null;
    for (const code of FLAGS) $("flag-filter").append(h("option", { value: code }, code));
    $("range").addEventListener("change", () => this.load());
    $("version").addEventListener("change", () => this.load());
    $("flag-filter").addEventListener("change", () => this.loadFlagged(true));
    $("flagged-more").addEventListener("click", () => this.loadFlagged(false));
    let resizing = null;
    window.addEventListener("resize", () => {
      clearTimeout(resizing);
      resizing = setTimeout(() => this.drawCharts(), 150);
    });
  }

  start() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const claims = token ? claimsOf(token) : {};
    if (claims.role !== "staff" && claims.role !== "admin") {
      this.say("Sign in on the console first; this page uses its session.", "error", true);
      return;
    }
    this.api.token = token;
    $("identity").textContent = `Signed in as ${claims.name || claims.sub}`;
    this.load();
  }

  /** The line above the page; `signIn` adds the way to the console's sign-in. */
  say(text, kind = "info", signIn = false) {
    const el = $("status");
    el.replaceChildren(text, signIn ? h("a", { href: "/console", class: "status-link" }, "Open the console") : "");
    el.dataset.kind = kind;
    el.hidden = !text;
  }

  async load() {
    const to = new Date();
    const from = new Date(to.getTime() - Number($("range").value) * 86_400_000);
    this.range = { from, to, days: Number($("range").value) };
    const query = new URLSearchParams({ from: from.toISOString(), to: to.toISOString(), group: "day" });
    const versions = new URLSearchParams({ from: from.toISOString(), to: to.toISOString(), by: "policy_version" });
    if ($("version").value) query.set("policy_version", $("version").value);
    let byVersion;
    try {
      [this.summary, byVersion] = await Promise.all([
        this.api.get(`/staff/analytics/summary?${query}`),
        this.api.get(`/staff/analytics/summary?${versions}`),
      ]);
    } catch (error) {
      this.say(error?.status === 404 ? "That is not a staff session." : userMessage(error), "error", error?.status === 404);
      return;
    }
    this.say("");
    this.sayWhen(this.summary);
    $("analytics").hidden = false;
    this.showTotals(this.summary.totals);
    this.showVersions(byVersion.policy_versions || []);
    this.drawCharts();
    await this.loadFlagged(true);
  }

  /** Why a conversation of a minute ago is not here yet: outcomes wait for it to go quiet. */
  sayWhen({ idle_min: idle, sweep_every_s: every }) {
    const el = $("when");
    if (idle === undefined) return;
    const quiet = idle > 0 ? `${minutes(idle)} after they go quiet` : "once they go quiet";
    const sweep = every > 0
      ? `, at the next sweep (every ${every >= 60 ? minutes(every / 60) : `${every} seconds`})`
      : ", when `cs-agent outcomes refresh` runs";
    el.textContent = `Conversations appear here ${quiet} (a handed-off one at once)${sweep}.`;
    el.hidden = false;
  }

  showTotals(t) {
    const rows = [
      ["Conversations", t.conversations],
      ["Resolved", `${t.resolved} (${pct(t.resolution_rate)})`],
      ["Handed off", `${t.handed_off} (${pct(t.handoff_rate)})`],
      ["Abandoned", t.abandoned],
      ["Failed", t.failed],
      ["With a tool error", pct(t.tool_error_rate)],
      ["Cost", usd(t.cost_usd)],
      ["Cost per conversation", t.conversations ? usd(t.cost_usd / t.conversations) : "–"],
      ["Time to first token p50 / p95", `${ms(t.ttft_p50_ms)} / ${ms(t.ttft_p95_ms)}`],
    ];
    $("totals").replaceChildren(
      ...rows.map(([label, value]) => h("div", { class: "total" }, h("dt", {}, label), h("dd", {}, String(value)))),
    );
  }

  /** Each policy version's conversations side by side (live and candidate), and the
   * selector's choices. */
  showVersions(versions) {
    const select = $("version");
    const keep = select.value;
    select.replaceChildren(
      h("option", { value: "" }, "All versions"),
      ...versions.map((v) => h("option", { value: v.policy_version ?? "" }, `Version ${v.policy_version ?? "–"}`)),
    );
    select.value = keep;
    const rows = [
      ["Conversations", (v) => v.conversations],
      ["Resolution rate", (v) => pct(v.resolution_rate)],
      ["Handoff rate", (v) => pct(v.handoff_rate)],
      ["With a tool error", (v) => pct(v.tool_error_rate)],
      ["Judge score (mean)", (v) => (v.score_avg === null ? "–" : `${v.score_avg} (${v.scored})`)],
      ["Cost", (v) => usd(v.cost_usd)],
    ];
    $("by-version-head").replaceChildren(
      h("tr", {}, h("th", { scope: "col" }, ""), ...versions.map((v) => h("th", { scope: "col" }, `Version ${v.policy_version ?? "–"}`))),
    );
    $("by-version-body").replaceChildren(
      ...rows.map(([label, value]) =>
        h("tr", {}, h("th", { scope: "row" }, label), ...versions.map((v) => h("td", { dataset: { version: v.policy_version } }, String(value(v))))),
      ),
    );
  }

  drawCharts() {
    if (!this.summary) return;
    for (const chart of this.charts) chart.destroy();
    const days = daysBetween(this.range.from, this.range.to);
    const { periods, totals } = this.summary;
    this.charts = [
      resultsChart($("chart-results"), days, periods),
      ratesChart($("chart-rates"), days, periods),
      toolsChart($("chart-tools"), totals.tools),
      costChart($("chart-cost"), days, periods),
      ttftChart($("chart-ttft"), days, periods),
    ];
    $("analytics").dataset.drawn = `${this.range.days}d`; // what is drawn (tests wait on it)
  }

  async loadFlagged(fresh) {
    if (fresh) {
      this.cursor = null;
      $("flagged").replaceChildren();
    }
    const flag = $("flag-filter").value;
    const query = new URLSearchParams({ limit: String(PAGE), ...(flag ? { flag } : { flagged: "true" }) });
    // the range the charts show: the table lists the flagged conversations they count
    query.set("from", this.range.from.toISOString());
    query.set("to", this.range.to.toISOString());
    if ($("version").value) query.set("policy_version", $("version").value);
    if (this.cursor) query.set("cursor", this.cursor);
    let page;
    try {
      page = await this.api.get(`/staff/analytics/conversations?${query}`);
    } catch (error) {
      this.say(userMessage(error), "error");
      return;
    }
    $("flagged").append(...page.items.map((item) => this.row(item)));
    this.cursor = page.next_cursor;
    $("flagged-more").hidden = !this.cursor;
    $("flagged-empty").hidden = $("flagged").children.length > 0;
  }

  row(item) {
    const flags = h(
      "ul",
      { class: "flags" },
      item.flags.map((f) => h("li", { dataset: { code: f.code } }, h("code", {}, f.code), " ", f.reason)),
    );
    const score = item.score === null ? "–" : String(item.score);
    const why = (item.score_reasons || []).map((r) => `${r.point} ${r.score}: ${r.reason}`).join("\n");
    return h(
      "tr",
      { dataset: { testid: "flagged-row", threadId: item.thread_id } },
      h("td", {}, new Date(item.ended_at).toLocaleString()),
      h("td", {}, h("a", { href: transcriptLink(item.thread_id), dataset: { testid: "open-transcript" } }, item.thread_id)),
      h("td", {}, item.result.replace("_", " "), item.handoff_reason ? h("div", { class: "muted" }, item.handoff_reason) : null),
      h("td", {}, flags),
      h("td", why ? { title: why } : {}, score),
      h("td", {}, String(item.turns)),
      h("td", {}, usd(item.cost_usd)),
    );
  }
}

new AnalyticsPage().start();
