"""The built-in demo model: a deterministic policy behind an in-process LangChain chat model.

Used when no real model is configured (no OPENAI_API_KEY / OPENAI_BASE_URL, or
LLM_PROVIDER=demo). The graph calls it like any chat model (model.py); the policy reads the
request a hosted model would be sent (chat.py).
"""
