"""`python -m tests.fakellm --port 8100 [--ttft-ms N --tps N] [--policy module:attr]`."""

from __future__ import annotations

import argparse
import importlib
import inspect
from collections.abc import Sequence
from typing import cast

import uvicorn

from tests.fakellm.engine import ModelEngine
from tests.fakellm.types import Latency, Policy

DEFAULT_POLICY = "tests.fakellm.policies:OrderLookupPolicy"


def load_policy(spec: str) -> Policy:
    """`module:attr`: a policy, a policy class, or a zero-argument factory of one."""
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"--policy must look like module:attr, got {spec!r}")
    target = getattr(importlib.import_module(module_name), attr)
    if isinstance(target, type) or _takes_no_arguments(target):
        return cast(Policy, target())
    return cast(Policy, target)


def _takes_no_arguments(target: object) -> bool:
    try:
        parameters = inspect.signature(target).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    optional = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return all(p.default is not p.empty or p.kind in optional for p in parameters)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.fakellm", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--ttft-ms", type=float, default=0.0, help="time to first token")
    parser.add_argument("--tps", type=float, default=None, help="streamed tokens per second")
    parser.add_argument("--policy", default=DEFAULT_POLICY, help="module:attr")
    parser.add_argument("--api-key", default=None, help="require this bearer token")
    return parser.parse_args(argv)


def engine_for(args: argparse.Namespace) -> ModelEngine:
    # A server process outside the tests: nothing reads its requests back, and a benchmark
    # sends it tens of thousands. Kept, they grew it past a gigabyte within minutes, and its
    # full garbage collections froze every model call for seconds.
    return ModelEngine(
        load_policy(args.policy),
        latency=Latency(ttft_ms=args.ttft_ms, tokens_per_s=args.tps),
        api_key=args.api_key,
        record=False,
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    engine = engine_for(args)
    print(f"fakellm: serving {args.policy} at http://{args.host}:{args.port}/v1", flush=True)
    uvicorn.run(engine.asgi_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
