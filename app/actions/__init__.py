"""Your own actions: tools from MCP servers and OpenAPI operations (docs/actions.md), with
the built-in tools' confirmation, write ledger, breaker and scope."""
