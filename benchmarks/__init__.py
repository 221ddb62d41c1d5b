"""Reproducible measurements of the service; `make bench` writes benchmarks/RESULTS.md."""
