"""The OpenAI chat-completions wire format: completion objects, stream chunks, usage."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from app.demo.chat import completion_tokens, prompt_tokens, split_words
from tests.fakellm.types import ChatRequest, JSONDict, Reply, StreamFault, ToolCall

ARGUMENT_PIECE_CHARS = 6
SYSTEM_FINGERPRINT = "fp_fakellm"


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @classmethod
    def of(cls, request: ChatRequest, reply: Reply) -> Usage:
        return cls(prompt_tokens(request), completion_tokens(reply))

    def as_dict(self) -> JSONDict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


def split_fixed(text: str, size: int = ARGUMENT_PIECE_CHARS) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def resolved_calls(reply: Reply) -> list[tuple[str, ToolCall]]:
    """Each tool call with its id; ids are generated once so stream and body agree."""
    return [(call.id or f"call_{uuid.uuid4().hex[:24]}", call) for call in reply.tool_calls]


def completion(request: ChatRequest, reply: Reply, usage: Usage) -> JSONDict:
    message: JSONDict = {"role": "assistant", "content": reply.text or None, "refusal": None}
    calls = resolved_calls(reply)
    if calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for call_id, call in calls
        ]
    return {
        "id": new_completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reply.resolved_finish_reason,
            }
        ],
        "usage": usage.as_dict(),
    }


def chunks(request: ChatRequest, reply: Reply, usage: Usage) -> Iterator[JSONDict]:
    """The stream: role, text word by word, each tool call in pieces, finish, then usage."""
    completion_id = new_completion_id()
    created = int(time.time())

    def chunk(delta: JSONDict, finish_reason: str | None = None) -> JSONDict:
        body: JSONDict = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": request.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if request.include_usage:
            body["usage"] = None
        return body

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for word in split_words(reply.text):
        yield chunk({"content": word})
    for index, (call_id, call) in enumerate(resolved_calls(reply)):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        for piece in split_fixed(call.arguments_json()):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, reply.resolved_finish_reason)
    if request.include_usage:
        yield {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": request.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [],
            "usage": usage.as_dict(),
        }


def broken_chunks(chunks: Iterable[JSONDict], fault: StreamFault) -> Iterator[JSONDict]:
    """The chunks a faulty stream sends before it breaks, or in the wrong shape."""
    if fault.kind == "wrong_schema":
        for chunk in chunks:
            # the delta outside the `choices` list, as some non-OpenAI servers put it
            body = {k: v for k, v in chunk.items() if k != "choices"}
            for choice in chunk.get("choices") or []:
                body["delta"] = choice["delta"]
            yield body
        return
    if fault.kind == "hang":
        return
    for sent, chunk in enumerate(chunks):
        finishes = any(c.get("finish_reason") for c in chunk.get("choices") or [])
        if sent == fault.after_chunks or (fault.kind == "truncate" and finishes):
            return
        yield chunk


def not_a_completion(request: ChatRequest, reply: Reply) -> JSONDict:
    """JSON that is no chat completion: the answer in the shape of Ollama's native
    `/api/chat`, not OpenAI's."""
    message = {"role": "assistant", "content": reply.text}
    return {"model": request.model, "message": message, "done": True}


def sse(data: JSONDict | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


def error_body(message: str, type_: str, code: str | None = None) -> JSONDict:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}
