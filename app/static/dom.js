// Building DOM nodes safely: text always goes in as text nodes, never as HTML.

/**
 * h("button", {class: "x", dataset: {testid: "send"}, onclick: fn}, "Send")
 * Attributes whose name starts with "on" become event listeners; everything else goes
 * through setAttribute. Children may be strings, numbers, nodes, arrays, null or false.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "dataset") {
      for (const [key, v] of Object.entries(value)) el.dataset[key] = String(v);
    } else if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2).toLowerCase(), value);
    } else if (name === "text") {
      el.textContent = String(value);
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

/** A time as "just now", "5 minutes ago", "yesterday" or a date. */
export function relativeTime(value, now = Date.now()) {
  const then = new Date(value).getTime();
  if (Number.isNaN(then)) return "";
  const seconds = Math.round((then - now) / 1000);
  const abs = Math.abs(seconds);
  if (abs < 45) return "just now";
  const rtf = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  if (abs < 3600) return rtf.format(Math.round(seconds / 60), "minute");
  if (abs < 86400) return rtf.format(Math.round(seconds / 3600), "hour");
  if (abs < 7 * 86400) return rtf.format(Math.round(seconds / 86400), "day");
  return new Date(then).toLocaleDateString();
}

export function prettyJson(value) {
  return JSON.stringify(value, null, 2);
}

/** Tool output pretty-printed when it is JSON, unchanged otherwise. */
export function prettyText(text) {
  const trimmed = String(text ?? "").trim();
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    try {
      return prettyJson(JSON.parse(trimmed));
    } catch {
      /* not JSON after all */
    }
  }
  return String(text ?? "");
}

export function newId() {
  if (globalThis.crypto?.randomUUID) return crypto.randomUUID();
  // crypto.randomUUID needs a secure context; plain-http LAN hosts fall back to this.
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
