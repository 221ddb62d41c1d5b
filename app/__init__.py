"""cs-agent: an async customer-service agent service."""
