// Friendly one-line descriptions of tool activity (the labels come from the tool specs),
// and compact summaries of results.

import { TOOL_LABELS } from "./tool-labels.js";

const orderRef = (args) => {
  const id = String(args?.order_id ?? "").trim();
  if (!id) return "your order";
  return `order ${id.startsWith("#") ? id : `#${id}`}`;
};

// The labels of the actions file's tools (GET /tool-labels), added at start.
const ACTION_LABELS = {};

export function addToolLabels(labels) {
  Object.assign(ACTION_LABELS, labels || {});
}

/** The spec's label with its `{order}` and `{argument}` places filled in. */
export function toolLabel(name, args) {
  const spec = Object.hasOwn(TOOL_LABELS, name)
    ? TOOL_LABELS[name]
    : Object.hasOwn(ACTION_LABELS, name) ? ACTION_LABELS[name] : null;
  if (!spec) return `Running ${name || "a tool"} …`;
  let missing = false;
  const label = spec.label.replace(/\{(\w+)\}/g, (_, key) => {
    if (key === "order") return orderRef(args);
    const value = args?.[key];
    if (value === undefined || value === null || String(value).trim() === "") missing = true;
    return String(value ?? "");
  });
  return missing ? spec.fallback ?? `Running ${name} …` : label;
}

/** {kind: "ok"|"error"|"declined", text} for the collapsed line of a tool result. The tool's
 * `done` line stands in for a result whose own words are not for the customer (an id). */
export function resultSummary(status, content, name = "") {
  const text = String(content ?? "").trim();
  if (status === "error") {
    const reason = text.replace(/^Error:\s*/i, "");
    return { kind: "error", text: `Failed: ${firstLine(reason, 120)}` };
  }
  if (/^Declined\b/.test(text)) return { kind: "declined", text: "Declined: nothing was changed" };
  if (/^Verification started\b/.test(text)) return { kind: "ok", text: "Done · if the details match an account, a code was emailed" };
  if (/^Not verified\b/.test(text)) return { kind: "error", text: firstLine(text, 120) };
  const done = Object.hasOwn(TOOL_LABELS, name) ? TOOL_LABELS[name].done : undefined;
  if (done) return { kind: "ok", text: `Done · ${done}` };
  const gist = jsonGist(text) ?? textGist(text);
  return { kind: "ok", text: `Done${gist ? ` · ${gist}` : ""}` };
}

/** A few telling fields of a JSON result ("order_id #W1 · status pending"), or null. */
function jsonGist(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (Array.isArray(value)) return plural(value.length, "result");
  if (value === null || typeof value !== "object") return firstLine(String(value), 80);
  return fieldsGist(value) ?? plural(Object.keys(value).length, "field");
}

/** The gist of a text result: a generic "Result of <tool>: 2 fields" shows its top-level
 * `key: value` lines; a labelled first line ("Order #W1: pending, 3 items, paid … by
 * credit_card_…") only its headline, before the first comma. */
function textGist(text) {
  const lines = text.split("\n");
  const generic = lines[0].match(/^Result of \S+: (.*)$/);
  if (generic) {
    if (lines.length === 1) return firstLine(generic[1], 80);
    const fields = {};
    for (const line of lines.slice(1)) {
      const field = line.match(/^(\w+): (.*)$/);
      if (field) fields[field[1]] = field[2];
    }
    return fieldsGist(fields);
  }
  if (/^[A-Z][^:]{0,60}: /.test(lines[0])) return firstLine(lines[0].split(", ")[0], 80);
  return firstLine(text, 80);
}

function fieldsGist(value) {
  const scalar = (v) => ["string", "number", "boolean"].includes(typeof v);
  const keys = Object.keys(value).filter((k) => scalar(value[k]));
  keys.sort((a, b) => (b === "status") - (a === "status"));
  const parts = keys.slice(0, 3).map((k) => `${k.replace(/_/g, " ")} ${value[k]}`);
  return parts.length ? firstLine(parts.join(" · "), 100) : null;
}

function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}

function firstLine(text, limit) {
  const line = text.split("\n", 1)[0];
  return line.length > limit ? `${line.slice(0, limit - 1)}…` : line;
}
