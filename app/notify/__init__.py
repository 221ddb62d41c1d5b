"""Messages to customers: senders (log, webhook, SMTP), the outbox, one-time identity codes."""
