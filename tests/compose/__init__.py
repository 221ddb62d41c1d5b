"""`make compose-test`: docker-compose.yml built and run for real, with podman (README "Run
with Docker or podman"). `python -m tests.compose` is the driver; nothing here is collected
by pytest."""
