// A tiny Markdown renderer that builds DOM nodes. Every character of the source ends up in a
// text node, so HTML in a message is shown, never run. Links are kept only for http(s) URLs.
//
// Blocks: paragraphs (single newlines become line breaks), ``` / ~~~ code blocks, bullet and
// numbered lists (nested by indentation), headings, block quotes, rules.
// Inline: `code`, **bold**, __bold__, *italic*, _italic_, [text](https://...), bare URLs,
// backslash escapes.

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const BULLET = /^(\s*)([-*+])\s+(.*)$/;
const NUMBERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;

export function renderMarkdown(source) {
  const lines = String(source ?? "").replace(/\r\n?/g, "\n").split("\n");
  const fragment = document.createDocumentFragment();
  renderBlocks(lines, fragment);
  return fragment;
}

function el(tag, ...children) {
  const node = document.createElement(tag);
  for (const child of children) node.append(child);
  return node;
}

function isBlank(line) {
  return line.trim() === "";
}

function listMarker(line) {
  const bullet = BULLET.exec(line);
  if (bullet) return { indent: bullet[1].length, ordered: false, text: bullet[3] };
  const numbered = NUMBERED.exec(line);
  if (numbered) {
    return {
      indent: numbered[1].length,
      ordered: true,
      start: Number(numbered[2]),
      text: numbered[3],
    };
  }
  return null;
}

function startsBlock(line) {
  return (
    FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
    listMarker(line) !== null
  );
}

function renderBlocks(lines, parent) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (isBlank(line)) {
      i++;
      continue;
    }
    const fence = FENCE.exec(line);
    if (fence) {
      i = renderCode(lines, i, fence, parent);
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      const level = Math.min(6, heading[1].length + 2);
      parent.append(el(`h${level}`, ...inline(heading[2])));
      i++;
      continue;
    }
    if (RULE.test(line)) {
      parent.append(document.createElement("hr"));
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      const inner = [];
      while (i < lines.length && QUOTE.test(lines[i])) inner.push(QUOTE.exec(lines[i++])[1]);
      const quote = document.createElement("blockquote");
      renderBlocks(inner, quote);
      parent.append(quote);
      continue;
    }
    if (listMarker(line)) {
      i = renderList(lines, i, parent);
      continue;
    }
    const paragraph = [];
    while (i < lines.length && !isBlank(lines[i]) && !(paragraph.length && startsBlock(lines[i]))) {
      paragraph.push(lines[i++].trim());
    }
    parent.append(el("p", ...withBreaks(paragraph)));
  }
}

function renderCode(lines, i, fence, parent) {
  const marker = fence[1];
  const body = [];
  i++;
  while (i < lines.length && !lines[i].trim().startsWith(marker)) body.push(lines[i++]);
  if (i < lines.length) i++; // the closing fence (absent while a reply is still streaming)
  const code = el("code", body.join("\n"));
  if (fence[2]) code.className = `language-${fence[2].replace(/[^\w+-]/g, "")}`;
  parent.append(el("pre", code));
  return i;
}

function renderList(lines, i, parent) {
  const first = listMarker(lines[i]);
  const list = document.createElement(first.ordered ? "ol" : "ul");
  if (first.ordered && first.start !== 1) list.start = first.start;
  let item = null;
  let itemLines = null;
  const flush = () => {
    if (item) {
      appendItemText(item, itemLines);
      list.append(item);
    }
  };
  while (i < lines.length) {
    const line = lines[i];
    if (isBlank(line)) {
      // A blank line ends the list unless the list continues right after it.
      const next = lines[i + 1];
      const nextMarker = next === undefined ? null : listMarker(next);
      if (nextMarker && nextMarker.indent >= first.indent) {
        i++;
        continue;
      }
      break;
    }
    const marker = listMarker(line);
    if (marker && marker.indent > first.indent && item) {
      // A nested list belongs to the current item.
      appendItemText(item, itemLines);
      itemLines = [];
      i = renderList(lines, i, item);
      continue;
    }
    if (marker && marker.indent >= first.indent - 1 && marker.ordered === first.ordered) {
      flush();
      item = document.createElement("li");
      itemLines = [marker.text];
      i++;
      continue;
    }
    if (marker || startsBlock(line) || !item) break;
    itemLines.push(line.trim()); // a continuation line of the current item
    i++;
  }
  flush();
  parent.append(list);
  return i;
}

function appendItemText(item, itemLines) {
  if (itemLines && itemLines.length) item.append(...withBreaks(itemLines));
}

function withBreaks(lines) {
  const nodes = [];
  lines.forEach((line, n) => {
    if (n > 0) nodes.push(document.createElement("br"));
    nodes.push(...inline(line));
  });
  return nodes;
}

/** Only absolute http(s) URLs become links. */
export function safeUrl(raw) {
  try {
    const url = new URL(raw);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}

function link(label, href) {
  const a = document.createElement("a");
  a.href = href;
  a.rel = "noopener noreferrer nofollow";
  a.target = "_blank";
  a.append(...label);
  return a;
}

// Each rule: a regex (global) and a builder from its match to nodes. The earliest match wins;
// for matches at the same place, the earlier rule.
const INLINE_RULES = [
  { re: /\\([\\`*_{}[\]()#+\-.!>~|])/g, build: (m) => [document.createTextNode(m[1])] },
  { re: /`([^`\n]+)`/g, build: (m) => [el("code", m[1])] },
  {
    re: /\[([^\]\n]+)\]\(\s*<?([^\s()<>]+)>?\s*\)/g,
    build: (m) => {
      const href = safeUrl(m[2]);
      return href ? [link(inline(m[1]), href)] : [document.createTextNode(m[0])];
    },
  },
  {
    re: /\bhttps?:\/\/[^\s<>"'`]+/g,
    build: (m) => {
      // Trailing punctuation belongs to the sentence, not the URL.
      const url = m[0].replace(/[.,;:!?)\]]+$/, "");
      const rest = m[0].slice(url.length);
      const href = safeUrl(url);
      const nodes = [href ? link([document.createTextNode(url)], href) : document.createTextNode(url)];
      if (rest) nodes.push(document.createTextNode(rest));
      return nodes;
    },
  },
  { re: /\*\*(?=\S)([\s\S]*?\S)\*\*/g, build: (m) => [el("strong", ...inline(m[1]))] },
  { re: /(?<!\w)__(?=\S)([\s\S]*?\S)__(?!\w)/g, build: (m) => [el("strong", ...inline(m[1]))] },
  { re: /\*([^\s*](?:[^*]*?[^\s*])?)\*/g, build: (m) => [el("em", ...inline(m[1]))] },
  { re: /(?<!\w)_([^\s_](?:[^_]*?[^\s_])?)_(?!\w)/g, build: (m) => [el("em", ...inline(m[1]))] },
];

export function inline(text) {
  const nodes = [];
  let pos = 0;
  while (pos < text.length) {
    let best = null;
    let bestRule = null;
    for (const rule of INLINE_RULES) {
      rule.re.lastIndex = pos;
      const m = rule.re.exec(text);
      if (m && (best === null || m.index < best.index)) {
        best = m;
        bestRule = rule;
      }
    }
    if (!best) break;
    if (best.index > pos) nodes.push(document.createTextNode(text.slice(pos, best.index)));
    nodes.push(...bestRule.build(best));
    pos = best.index + best[0].length;
  }
  if (pos < text.length) nodes.push(document.createTextNode(text.slice(pos)));
  return nodes;
}
