"""The peer: what most LangGraph tutorials produce, with its authors' defaults.

FastAPI + `langgraph.prebuilt.create_react_agent` + `AsyncPostgresSaver.from_conn_string`
+ `stream_mode="messages"` into a `StreamingResponse` of `data:` lines. It shares only
the tools (so the database work per tool call is identical) and the scripted model.
"""
