"""A text ReAct protocol for models without native tool calling.

The model writes `Thought:` / `Action:` / `Action Input:` to call a tool and `Final Answer:` to
reply. `parse_reply` reads that back, strictly first and then leniently (case and spacing of the
labels, code fences, trailing comments, Python-style quoting, a bare string for a one-argument
tool, a misspelt tool name). When a reply holds both an action and a final answer, whichever
label comes first in the text wins: an action followed by a made-up observation and answer is an
action, and a final answer that mentions `Action:` further down is an answer.

Pure functions only: the agent node decides what to do with the result.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.tools import BaseTool
from pydantic import BaseModel

from app.tools.results import error_text

Level = Literal["strict", "lenient"]


@dataclass(frozen=True)
class ActionStep:
    thought: str
    tool: str
    args: dict[str, Any]
    level: Level


@dataclass(frozen=True)
class FinalAnswer:
    text: str
    thought: str


@dataclass(frozen=True)
class Unparseable:
    reason: str


Parsed = ActionStep | FinalAnswer | Unparseable

# Labels start a line, may be bold (`**Action:**`) and end in ':' or '-'.
_OPEN = r"^[ \t]*(?:[*_]{1,2}[ \t]*)?"
_CLOSE = r"[ \t]*[*_]{0,2}[ \t]*[:\-–][*_]{0,2}[ \t]*"
_FLAGS = re.IGNORECASE | re.MULTILINE
FINAL_RE = re.compile(_OPEN + r"final[ \t_-]*answer" + _CLOSE, _FLAGS)
ACTION_RE = re.compile(_OPEN + r"action(?![ \t_-]*input)" + _CLOSE, _FLAGS)
INPUT_RE = re.compile(_OPEN + r"action[ \t_-]*input" + _CLOSE, _FLAGS)
THOUGHT_RE = re.compile(_OPEN + r"thought" + _CLOSE, _FLAGS)
# Where an action's input ends: the next label of any kind.
STOP_RE = re.compile(
    _OPEN + r"(?:observation|thought|final[ \t_-]*answer|action(?:[ \t_-]*input)?)\b"
    r"[^\n]{0,3}?[:\-–]",
    _FLAGS,
)
FENCE_RE = re.compile(r"```[\w-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
TRAILING_COMMA_RE = re.compile(r",\s*([}\]])")
TRAILING_COMMENT_RE = re.compile(r"\s+(?://|#\s).*$")
KEY_VALUE_RE = re.compile(r"^(\w+)\s*[:=]\s*(.+)$", re.DOTALL)
MAX_LITERAL = 5000
CLOSE_MATCH_CUTOFF = 0.8
CLOSE_MATCH_MARGIN = 0.1  # the runner-up must be this much worse, or the name is ambiguous
MAX_ECHO = 64

FORMAT_REMINDER = (
    "Reply in exactly one of these two formats.\n"
    "To use a tool:\n"
    "Thought: <one line of reasoning>\n"
    "Action: <one tool name from the list>\n"
    'Action Input: <the arguments as one JSON object, e.g. {"order_id": "#W0000000"}>\n'
    "To answer the customer:\n"
    "Thought: <one line of reasoning>\n"
    "Final Answer: <your message to the customer>"
)

_EXAMPLE = """\
Thought: I need the order's status.
Action: get_order_details
Action Input: {"order_id": "#W0000000"}
Observation: [get_order_details] Order #W0000000: pending, 1 item, paid 24.99 CNY by \
credit_card_0000000
Thought: I have what I need.
Final Answer: Your order #W0000000 is pending: it has not shipped yet."""


def render_tools_prompt(tools: Sequence[BaseTool]) -> str:
    """The tool list, the reply format and one worked example, for the system prompt."""
    lines = ["You can use these tools:"]
    for tool in tools:
        purpose = (tool.description or tool.name).strip().splitlines()[0]
        lines.append(f"- {tool.name}: {purpose}")
        lines.append(f"  arguments{_compact_schema(tool)}")
    lines += [
        "",
        "To use a tool, reply with these three lines and stop; the result comes back as "
        '"Observation: ...". Use one tool per reply.',
        "Thought: <one line of reasoning>",
        "Action: <the tool name, exactly as listed>",
        "Action Input: <the arguments as one JSON object on one line>",
        "When you can reply to the customer (an answer or a question), write:",
        "Thought: <one line of reasoning>",
        "Final Answer: <your message to the customer>",
        "",
        "Example:",
        _example(tools),
    ]
    return "\n".join(lines)


def _compact_schema(tool: BaseTool) -> str:
    """': <the properties as one-line JSON Schema>' plus which are required; no titles."""
    properties = {k: _untitled(v) for k, v in _properties(tool).items()}
    if not properties:
        return ": none (use {})"
    raw = _schema(tool)
    shown: dict[str, Any] = dict(properties)
    if "$defs" in raw:
        shown["$defs"] = _untitled(raw["$defs"], names=True)
    text = json.dumps(shown, separators=(",", ":"), ensure_ascii=False)
    required = [r for r in raw.get("required") or [] if r in properties]
    if len(required) == len(properties):
        return f" (all required): {text}"
    return f": {text}; required: {', '.join(required) or 'none'}"


def _untitled(value: Any, *, names: bool = False) -> Any:
    """`value` without schema titles; `names` marks a mapping of property names to keep."""
    if isinstance(value, dict):
        return {
            k: _untitled(v, names=k in ("properties", "$defs") and not names)
            for k, v in value.items()
            if names or k != "title"
        }
    if isinstance(value, list):
        return [_untitled(v) for v in value]
    return value


def _example(tools: Sequence[BaseTool]) -> str:
    if not tools or any(t.name == "get_order_details" for t in tools):
        return _EXAMPLE
    tool = tools[0]
    names = tool_arg_names([tool])[tool.name]
    args = json.dumps({names[0]: "..."}) if names else "{}"
    return (
        f"Thought: I need to look this up.\nAction: {tool.name}\nAction Input: {args}\n"
        f"Observation: [{tool.name}] ...\nThought: I have what I need.\n"
        "Final Answer: <the answer, based on the observation>"
    )


def tool_arg_names(tools: Sequence[BaseTool]) -> dict[str, list[str]]:
    """Each tool's argument names as the model sees them: the `arg_names` of `parse_reply`."""
    return {t.name: list(_properties(t)) for t in tools}


def _properties(tool: BaseTool) -> dict[str, Any]:
    raw = _schema(tool)
    properties = raw.get("properties")
    if not isinstance(properties, dict):
        properties = dict(tool.args)
    # `tool_call_schema` already leaves injected arguments out; this guards hand-made schemas.
    return {k: v for k, v in properties.items() if k != "runtime"}


def _schema(tool: BaseTool) -> dict[str, Any]:
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        return schema
    if issubclass(schema, BaseModel):
        return schema.model_json_schema()
    return schema.schema()  # a pydantic.v1 model


def format_error_observation(reason: str) -> str:
    """What the model reads after a reply that `parse_reply` could not use."""
    unreadable = error_text(f"your reply could not be read ({reason}).")
    return f"Observation: {unreadable}\n{FORMAT_REMINDER}"


def observation_text(tool_name: str, content: str) -> str:
    """A tool's result as the plain-text observation of react mode."""
    body = content.strip()
    return f"Observation: [{tool_name}]{chr(10) if chr(10) in body else ' '}{body}"


def parse_reply(
    text: str, tool_names: Sequence[str], arg_names: Mapping[str, Sequence[str]]
) -> Parsed:
    """Read one model reply. `arg_names` maps each tool to its argument names
    (`tool_arg_names`); it decides when a bare string may stand for the arguments.

    An empty reply, or an empty Final Answer, is Unparseable: the customer would see nothing."""
    found = _first_marker(text)
    if found is None:
        answer, thought = _unmarked(text)
        return FinalAnswer(text=answer, thought=thought) if answer else Unparseable("empty reply")
    kind, label = found
    if kind == "final":
        answer = text[label.end() :].strip()
        if not answer:
            return Unparseable("the Final Answer is empty")
        return FinalAnswer(text=answer, thought=_thought(text[: label.start()]))
    if kind == "input":
        return Unparseable("an Action Input line came before any Action line")
    return _action(text, label, tool_names, arg_names)


def final_answer_text(text: str) -> str:
    """The customer-facing text of a whole reply: its final answer, or '' for an action."""
    found = _first_marker(text)
    if found is None:
        return _unmarked(text)[0]
    kind, label = found
    return text[label.end() :].strip() if kind == "final" else ""


def _first_marker(text: str, pos: int = 0) -> tuple[str, re.Match[str]] | None:
    matches = [
        (m.start(), kind, m)
        for kind, pattern in (("final", FINAL_RE), ("action", ACTION_RE), ("input", INPUT_RE))
        if (m := pattern.search(text, pos)) is not None
    ]
    if not matches:
        return None
    _, kind, match = min(matches, key=lambda t: t[0])
    return kind, match


def _thought(prefix: str) -> str:
    stripped = prefix.strip()
    label = THOUGHT_RE.match(stripped)
    return stripped[label.end() :].strip() if label else stripped


def _unmarked(text: str) -> tuple[str, str]:
    """(answer, thought) of a reply without labels: the text minus a leading Thought line.
    A reply that is only a thought is answered with that thought rather than nothing."""
    stripped = text.strip()
    label = THOUGHT_RE.match(stripped)
    if label is None:
        return stripped, ""
    line_end = stripped.find("\n", label.end())
    if line_end < 0:
        thought = stripped[label.end() :].strip()
        return thought, thought
    thought = stripped[label.end() : line_end].strip()
    return stripped[line_end:].strip() or thought, thought


def _action(
    text: str,
    label: re.Match[str],
    tool_names: Sequence[str],
    arg_names: Mapping[str, Sequence[str]],
) -> Parsed:
    line_end = text.find("\n", label.end())
    line_end = len(text) if line_end < 0 else line_end
    named = text[label.end() : line_end].strip()
    inline: str | None = None
    call = re.fullmatch(r"`?([\w.-]+)`?\s*\((.*)\)\s*\.?", named, re.DOTALL)
    if call:  # get_order_details({"order_id": "#W1"})
        named, inline = call.group(1), call.group(2)
    resolved = _resolve_tool(named, tool_names)
    if resolved is None:
        return Unparseable(_unknown_tool(named, tool_names))
    tool, exact_name = resolved
    names = arg_names.get(tool)
    strict_labels = label.group(0).strip() == "Action:"
    if inline is not None:
        raw, strict_labels = inline, False
    else:
        rest = text[line_end:]
        input_label = INPUT_RE.search(rest)
        if input_label is None or STOP_RE.search(rest, 0, input_label.start()):
            if names is not None and not names:
                return ActionStep(_thought(text[: label.start()]), tool, {}, "lenient")
            return Unparseable(f"no Action Input line for {tool}")
        strict_labels = strict_labels and input_label.group(0).strip() == "Action Input:"
        stop = STOP_RE.search(rest, input_label.end())
        raw = rest[input_label.end() : stop.start() if stop else len(rest)]
    args, strict_args = _arguments(raw, names)
    if args is None:
        return Unparseable(f"the Action Input for {tool} is not a JSON object")
    level: Level = "strict" if strict_labels and exact_name and strict_args else "lenient"
    return ActionStep(_thought(text[: label.start()]), tool, args, level)


def _resolve_tool(named: str, tool_names: Sequence[str]) -> tuple[str, bool] | None:
    """(registered name, written exactly) for the tool an Action line names, if any."""
    if named in tool_names:
        return named, True
    cleaned = named.strip("`*'\" ").rstrip(".:").strip("`*'\" ")
    first_word = cleaned.split(maxsplit=1)[0].strip("`*'\".,:") if cleaned else ""
    for candidate in (cleaned, first_word):
        if candidate in tool_names:
            return candidate, False
    by_key = {name.lower(): name for name in tool_names}
    key = re.sub(r"[\s-]+", "_", cleaned.lower())
    if key in by_key:
        return by_key[key], False
    scored = sorted(
        ((difflib.SequenceMatcher(None, key, k).ratio(), k) for k in by_key), reverse=True
    )
    if not scored or scored[0][0] < CLOSE_MATCH_CUTOFF:
        return None
    if len(scored) > 1 and scored[0][0] - scored[1][0] < CLOSE_MATCH_MARGIN:
        return None  # e.g. modify_order_address: user or pending-order address?
    return by_key[scored[0][1]], False


def _unknown_tool(named: str, tool_names: Sequence[str]) -> str:
    if not named:
        return "the Action line names no tool"
    shown = named if len(named) <= MAX_ECHO else named[:MAX_ECHO] + "…"
    return f"unknown tool {shown!r}; use one of: {', '.join(tool_names)}"


def _arguments(raw: str, names: Sequence[str] | None) -> tuple[dict[str, Any] | None, bool]:
    """(arguments, parsed strictly) from an Action Input; None when no object can be read."""
    text = raw.strip()
    strict = _loads_object(text)
    if strict is not None:
        return strict, True
    fence = FENCE_RE.search(text)
    if fence:
        text = fence.group(1).strip()
    text = text.strip("`").strip()
    found = _lenient_object(text)
    if found is not None:
        return found, False
    if names is not None and not names:
        return {}, False  # a tool without arguments: whatever was written does not matter
    if names is not None and len(names) == 1 and text and text[0] not in "{[":
        bare = _bare_string(text, names[0])
        if bare:
            return {names[0]: bare}, False
    return None, False


def _loads_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _lenient_object(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    if start < 0:
        return None
    candidate = text[start:]
    try:
        value, _ = json.JSONDecoder().raw_decode(candidate)  # ignores a trailing comment
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    body = candidate[: candidate.rfind("}") + 1]
    if not body:
        return None
    repaired = _loads_object(TRAILING_COMMA_RE.sub(r"\1", body))
    if repaired is not None:
        return repaired
    if len(body) > MAX_LITERAL:
        return None
    try:  # single quotes: a Python dict literal (literal_eval never runs code)
        literal = ast.literal_eval(body)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return _json_object(literal)


def _json_object(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return None
    try:
        normalised = json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return None
    return normalised if isinstance(normalised, dict) else None


def _bare_string(text: str, name: str) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    key_value = KEY_VALUE_RE.match(line)
    if key_value and key_value.group(1) == name:
        line = key_value.group(2).strip()
    line = TRAILING_COMMENT_RE.sub("", line).strip()
    try:
        decoded = json.loads(line)
    except ValueError:
        decoded = None
    if isinstance(decoded, str):
        return decoded
    if len(line) >= 2 and line[0] == line[-1] and line[0] in "'\"`":
        line = line[1:-1]
    return line


class FinalAnswerFilter:
    """Passes on, from a reply's streamed text, only what `final_answer_text` would return.

    Nothing is passed while the model writes Thought/Action lines; after a `Final Answer:`
    label everything is, as it arrives, except surrounding whitespace. A reply with no label at
    all is only known to be an answer at its end: `flush()` returns it then.
    """

    def __init__(self) -> None:
        self._text = ""
        self._state: Literal["searching", "answer", "done"] = "searching"
        self._scan_from = 0  # searching: start of the first line that may still hold a label
        self._pos = 0  # answer: the next index of _text to pass on
        self._started = False

    def feed(self, delta: str) -> str:
        if self._state == "done":
            return ""
        self._text += delta
        if self._state == "searching":
            self._search()
        return self._emit() if self._state == "answer" else ""

    def flush(self) -> str:
        state, self._state = self._state, "done"
        if state == "searching":
            return final_answer_text(self._text)
        return ""  # an answer's trailing whitespace is dropped, as str.strip() would

    def _search(self) -> None:
        found = _first_marker(self._text, self._scan_from)
        if found is None:
            # Complete lines without a label never gain one.
            self._scan_from = self._text.rfind("\n") + 1
            return
        kind, label = found
        self._scan_from = self._text.rfind("\n", 0, label.start()) + 1
        if kind == "final":
            # The label may still grow ('Final Answer:' + '**'): wait for one more character.
            if label.end() < len(self._text):
                self._state, self._pos = "answer", label.end()
        elif "\n" in self._text[label.end() :]:
            self._state = "done"  # an Action (Input) line came first: no answer to show

    def _emit(self) -> str:
        text, pos = self._text, self._pos
        if not self._started:
            while pos < len(text) and text[pos].isspace():
                pos += 1
        end = len(text.rstrip())
        if end <= pos:
            self._pos = pos
            return ""
        self._pos, self._started = end, True
        return text[pos:end]


def final_answer_stream_filter() -> FinalAnswerFilter:
    return FinalAnswerFilter()
