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

/** {kind: "ok"|"error"|"declined", text} for the collapsed line of a tool result. */
export function resultSummary(status, content) {
  const text = String(content ?? "").trim();
  if (status === "error") {
    const reason = text.replace(/^Error:\s*/i, "");
    return { kind: "error", text: `Failed: ${firstLine(reason, 120)}` };
  }
  if (/^Declined\b/.test(text)) return { kind: "declined", text: "Declined: nothing was changed" };
  if (/^Verification started\b/.test(text)) return { kind: "ok", text: "Done · if the details match an account, a code was emailed" };
  if (/^Not verified\b/.test(text)) return { kind: "error", text: firstLine(text, 120) };
  const gist = jsonGist(text) ?? firstLine(text, 80);
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
  if (Array.isArray(value)) return `${value.length} result${value.length === 1 ? "" : "s"}`;
  if (value === null || typeof value !== "object") return firstLine(String(value), 80);
  const scalar = (v) => ["string", "number", "boolean"].includes(typeof v);
  const keys = Object.keys(value).filter((k) => scalar(value[k]));
  keys.sort((a, b) => (b === "status") - (a === "status"));
  const parts = keys.slice(0, 3).map((k) => `${k.replace(/_/g, " ")} ${value[k]}`);
  return parts.length ? firstLine(parts.join(" · "), 100) : `${Object.keys(value).length} fields`;
}

function firstLine(text, limit) {
  const line = text.split("\n", 1)[0];
  return line.length > limit ? `${line.slice(0, limit - 1)}…` : line;
}
