"""`python -m tests.chaos --duration 10m --seed 7 [--out DIR]` (`make chaos`).

Prints where the report is and its invariant counts; exits 1 when any count is not 0.
FAULTS_APP_ROOT=<a copy of the tree> serves that copy instead (`make chaos-selftest`).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.chaos.faults import ACTION_PATH_SHARE, WEIGHTS
from tests.chaos.scenarios import CONFIRM_OPS
from tests.chaos.soak import Settings, soak

OUT = Path(__file__).resolve().parent / "out"  # ignored by git (tests/chaos/.gitignore)


def seconds(text: str) -> float:
    """`120`, `120s` or `10m`."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([sm]?)", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"a duration such as 120s or 10m, not {text!r}")
    value = float(match.group(1))
    return value * 60 if match.group(2) == "m" else value


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--duration", type=seconds, default=seconds("120s"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help=f"default: {OUT}/seed-N")
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--gap", type=float, default=3.0, help="mean seconds between faults")
    parser.add_argument(
        "--faults", default=",".join(WEIGHTS), help=f"kinds, comma-separated: {','.join(WEIGHTS)}"
    )
    names = [op.__name__ for op, _ in CONFIRM_OPS]
    parser.add_argument(
        "--ops", default=None, help=f"the confirm pool's operations (default all): {names}"
    )
    parser.add_argument(
        "--action-share",
        type=float,
        default=ACTION_PATH_SHARE,
        help="the share of latency, reset, black hole and lost reply faults on action paths",
    )
    args = parser.parse_args(argv)
    ops = None if args.ops is None else [o for o in args.ops.split(",") if o]
    if ops is not None and (not ops or set(ops) - set(names)):
        parser.error(f"unknown operations: {sorted(set(ops) - set(names))}")
    kinds = [k for k in args.faults.split(",") if k]
    unknown = [k for k in kinds if k not in WEIGHTS]
    if unknown:
        parser.error(f"unknown fault kinds: {unknown}")
    out = args.out or OUT / f"seed-{args.seed}"
    return Settings(
        duration_s=args.duration,
        seed=args.seed,
        out=out,
        clients=args.clients,
        direct_clients=max(1, args.clients // 3),
        gap_s=args.gap,
        kinds=kinds,
        ops=ops,
        action_share=args.action_share,
    )


def main(argv: Sequence[str] | None = None) -> int:
    from tests.chaos import report

    settings = parse_args(argv)
    outcome = asyncio.run(soak(settings))
    path = report.write(outcome)
    for invariant in outcome.invariants:
        print(f"chaos: {invariant.name} = {invariant.count}")
    verdict = "OK" if outcome.violations == 0 else f"FAILED ({outcome.violations} violations)"
    print(f"chaos: {verdict}; report: {path}", flush=True)
    return 0 if outcome.violations == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
