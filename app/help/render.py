"""One help article as a small HTML page. Every piece of article text is escaped; the only
markup is the page's own, so an article cannot inject a tag, an attribute or a script."""

from __future__ import annotations

import re
from html import escape

from app.help.articles import HelpArticle

# The page has no script and loads nothing; the route sends this as its Content-Security-Policy.
PAGE_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
_BULLET_RE = re.compile(r"[-*]\s+(.*)")
_NUMBERED_RE = re.compile(r"\d{1,3}[.)]\s+(.*)")
_HEADING_RE = re.compile(r"#{2,3}\s+(.*)")
_STYLE = (
    "body{font:16px/1.55 system-ui,sans-serif;color:#1f2328;max-width:42rem;margin:2rem auto;"
    "padding:0 1rem}h1{font-size:1.6rem;line-height:1.25}.updated{color:#59636e;margin-top:0}"
    "li{margin:.25rem 0}"
)


def article_page(article: HelpArticle) -> str:
    title = escape(article.title)
    updated = article.updated
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title} · Help centre</title><style>{_STYLE}</style></head>"
        f"<body><main><article><h1>{title}</h1>"
        f'<p class="updated">Updated <time datetime="{updated.isoformat()}">'
        f"{updated.day} {updated:%B %Y}</time></p>\n"
        f"{body_html(article.body)}\n</article></main></body></html>\n"
    )


def body_html(body: str) -> str:
    """Paragraphs (blank-line separated), "- " and "1. " lists, "## " headings; all escaped."""
    blocks: list[str] = []
    kind = ""  # the open block: "p", "ul", "ol" or ""
    parts: list[str] = []  # its paragraph lines, or its list items

    def close() -> None:
        nonlocal kind, parts
        if kind == "p":
            blocks.append(f"<p>{escape(' '.join(parts))}</p>")
        elif kind:
            items = "".join(f"<li>{escape(item)}</li>" for item in parts)
            blocks.append(f"<{kind}>{items}</{kind}>")
        kind, parts = "", []

    for raw in body.splitlines():
        line = raw.strip()
        item = _BULLET_RE.fullmatch(line) or _NUMBERED_RE.fullmatch(line)
        heading = _HEADING_RE.fullmatch(line)
        if not line:
            close()
        elif heading:
            close()
            blocks.append(f"<h2>{escape(heading.group(1))}</h2>")
        elif item:
            wanted = "ul" if item.re is _BULLET_RE else "ol"
            if kind != wanted:
                close()
                kind = wanted
            parts.append(item.group(1))
        elif kind in ("ul", "ol") and raw[:1].isspace():
            parts[-1] += " " + line  # an indented line continues the list item
        else:
            if kind != "p":
                close()
                kind = "p"
            parts.append(line)
    close()
    return "\n".join(blocks)
