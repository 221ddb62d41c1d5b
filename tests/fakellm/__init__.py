"""A scripted OpenAI-compatible chat-completions server.

Tests start a `ScriptedModelServer` and point the real `ChatOpenAI` at its `base_url`:
scripted replies, faults injected on purpose, every request recorded. Benchmarks serve a
policy with it as their model (`python -m tests.fakellm --policy module:attr`).
"""

from tests.fakellm.engine import ModelEngine
from tests.fakellm.policies import OrderLookupPolicy
from tests.fakellm.script import Router, Script, ScriptExhausted, Step
from tests.fakellm.server import ScriptedModelServer
from tests.fakellm.types import (
    ChatRequest,
    Fault,
    Latency,
    Policy,
    Reply,
    StreamFault,
    ToolCall,
    ToolResult,
)

__all__ = [
    "ChatRequest",
    "Fault",
    "Latency",
    "ModelEngine",
    "OrderLookupPolicy",
    "Policy",
    "Reply",
    "Router",
    "Script",
    "ScriptExhausted",
    "ScriptedModelServer",
    "Step",
    "StreamFault",
    "ToolCall",
    "ToolResult",
]
