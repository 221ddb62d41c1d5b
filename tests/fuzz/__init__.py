"""`make fuzz`: schemathesis against a service it starts (tests/fuzz/run.py)."""
