"""A scripted OpenAI-compatible chat-completions server.

Tests start a `ScriptedModelServer` and point the real `ChatOpenAI` at its `base_url`;
the app can ship an offline demo model on the same engine.
"""

from app.fakellm.engine import ModelEngine
from app.fakellm.policies import OrderLookupPolicy
from app.fakellm.script import Router, Script, ScriptExhausted, Step
from app.fakellm.server import ScriptedModelServer
from app.fakellm.types import (
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
