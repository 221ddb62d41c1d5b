"""The built-in demo model: a deterministic policy on the fakellm engine, served in-process.

Used when no real model is configured (no OPENAI_API_KEY / OPENAI_BASE_URL, or
LLM_PROVIDER=demo). The app talks to it through the real ChatOpenAI, like any hosted model.
"""
