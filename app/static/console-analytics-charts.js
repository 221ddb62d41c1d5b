// The analytics page's charts, drawn by uPlot (app/static/vendor/uplot, loaded as the
// global `uPlot` before this module). Each chart takes the summary API's periods, laid
// over every day of the range so a quiet day shows as zero (or a gap for a rate).

const { uPlot } = globalThis; // the vendored script's global
const HEIGHT = 220;
const DAY_S = 86_400;
// Distinct in light and dark mode alike.
export const COLORS = {
  resolved: "#2e9d5b",
  handed_off: "#3d6fe0",
  abandoned: "#d99a1e",
  failed: "#d2433b",
  p95: "#9b59b6",
};

/** Midnight UTC of every day from `from` to `to` (dates), in seconds, as uPlot's x. */
export function daysBetween(from, to) {
  const first = Math.floor(from.getTime() / 1000 / DAY_S) * DAY_S;
  const days = [];
  for (let t = first; t < to.getTime() / 1000; t += DAY_S) days.push(t);
  return days;
}

/** The periods by their start (seconds), so a day can be looked up. */
function byDay(periods) {
  return new Map(periods.map((p) => [Math.floor(Date.parse(p.start) / 1000), p]));
}

function widthOf(el) {
  return Math.max(280, Math.floor(el.clientWidth || el.parentElement?.clientWidth || 600));
}

function line(label, stroke, extra = {}) {
  return { label, stroke, width: 2, points: { show: true, size: 7 }, spanGaps: false, ...extra };
}

function axisColor() {
  return getComputedStyle(document.documentElement).getPropertyValue("--muted").trim() || "#5d6b7e";
}

function axes(yValues) {
  const stroke = axisColor();
  const grid = { stroke: "rgba(128, 128, 128, .18)", width: 1 };
  return [
    { stroke, grid, ticks: grid },
    { stroke, grid, ticks: grid, size: 70, ...(yValues ? { values: yValues } : {}) },
  ];
}

const percent = (u, splits) => splits.map((v) => `${Math.round(v * 100)}%`);

/** One chart in `el`, replacing what it showed. */
function draw(el, options, data) {
  el.replaceChildren();
  return new uPlot({ width: widthOf(el), height: HEIGHT, legend: { live: false }, ...options }, data, el);
}

export function resultsChart(el, days, periods) {
  const at = byDay(periods);
  const results = ["resolved", "handed_off", "abandoned", "failed"];
  const data = [days, ...results.map((r) => days.map((d) => at.get(d)?.[r] ?? 0))];
  return draw(
    el,
    {
      series: [{}, ...results.map((r) => line(r.replace("_", " "), COLORS[r]))],
      axes: axes((u, splits) => splits.map((v) => (Number.isInteger(v) ? String(v) : ""))),
      scales: { y: { range: (u, min, max) => [0, Math.max(1, max)] } },
    },
    data,
  );
}

export function ratesChart(el, days, periods) {
  const at = byDay(periods);
  const rate = (key) => days.map((d) => (at.get(d)?.conversations ? at.get(d)[key] : null));
  return draw(
    el,
    {
      series: [
        {},
        line("resolution rate", COLORS.resolved),
        line("handoff rate", COLORS.handed_off),
      ],
      axes: axes(percent),
      scales: { y: { range: [0, 1] } },
    },
    [days, rate("resolution_rate"), rate("handoff_rate")],
  );
}

export function costChart(el, days, periods) {
  const at = byDay(periods);
  const each = days.map((d) => {
    const p = at.get(d);
    return p?.conversations ? p.cost_usd / p.conversations : null;
  });
  return draw(
    el,
    {
      series: [{}, line("cost per conversation", COLORS.handed_off)],
      axes: axes((u, splits) => splits.map((v) => `$${v.toPrecision(2)}`)),
      scales: { y: { range: (u, min, max) => [0, max > 0 ? max * 1.2 : 0.001] } },
    },
    [days, each],
  );
}

export function ttftChart(el, days, periods) {
  const at = byDay(periods);
  const ms = (key) => days.map((d) => at.get(d)?.[key] ?? null);
  return draw(
    el,
    {
      series: [{}, line("p50", COLORS.resolved), line("p95", COLORS.p95)],
      axes: axes((u, splits) => splits.map((v) => `${Math.round(v)} ms`)),
      scales: { y: { range: (u, min, max) => [0, max > 0 ? max * 1.2 : 1] } },
    },
    [days, ms("ttft_p50_ms"), ms("ttft_p95_ms")],
  );
}

/** Bars, one per tool (x is the tool's index), of failed calls over calls in the range. */
export function toolsChart(el, tools) {
  const names = Object.keys(tools).sort();
  const xs = names.map((_, i) => i);
  const bars = uPlot.paths.bars({ size: [0.6, 64] });
  const stroke = axisColor();
  const grid = { stroke: "rgba(128, 128, 128, .18)", width: 1 };
  return draw(
    el,
    {
      series: [
        { label: "tool", value: (u, i) => names[i] ?? "" },
        {
          label: "error rate",
          stroke: COLORS.failed,
          fill: "rgba(210, 67, 59, .55)",
          paths: bars,
          points: { show: false },
        },
      ],
      scales: {
        x: { time: false, range: () => [-0.5, Math.max(names.length, 1) - 0.5] },
        y: { range: [0, 1] },
      },
      axes: [
        {
          stroke,
          grid: { show: false },
          splits: () => xs,
          values: (u, splits) => splits.map((i) => names[i] ?? ""),
          rotate: names.length > 4 ? -30 : 0,
          size: names.length > 4 ? 90 : 40,
        },
        { stroke, grid, ticks: grid, size: 70, values: percent },
      ],
    },
    [xs, names.map((n) => tools[n].error_rate)],
  );
}
