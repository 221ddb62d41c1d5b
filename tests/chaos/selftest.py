"""`make chaos-selftest`: the soak must catch a fault put back into a copy of the service.

    python -m tests.chaos.selftest [--patch tests/chaos/planted/no-fence.patch]

Planted faults (tests/chaos/planted/), each with the faults that bring it out:

- no-fence.patch: `fence()` does not check the lease (SIGSTOP past the lease, kill -9).
- lost-commit-told-failed.patch: a write whose connection broke is taken as not done
  (`nothing was changed`) without reading back what the database holds: its COMMIT may
  have run, its answer lost (`net_lost_reply`, half of them on a write's COMMIT).
- resend-non-idempotent.patch: an external write that is not idempotent is sent again
  after its answer was lost, like an idempotent one (`net_lost_reply` on the replicas'
  paths to the action servers, the customers asking only for external writes).

1. `git archive HEAD app` into a temp folder: the committed service, nothing else.
2. The patch applied to it (`patch -p1`); by default no-fence.patch, which makes `fence()`
   (app/db/leases.py) return without checking the lease: a run that lost its claim commits.
3. The soak against that copy (FAULTS_APP_ROOT: the replicas and migrations come from it;
   the harness stays this tree's), with the faults that take a claim away (SIGSTOP past
   the lease, kill -9), one every `--gap` seconds.
4. Exit 0 when the checker caught it: an invariant the patch breaks is above 0. Exit 1 when
   it missed (or the soak could not run). The product has no switch for any of this.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLANTED = Path(__file__).resolve().parent / "planted"
# What a lost fence lets through: a second writer's commits fork the chain, and the stale
# run's later checkpoints can become the head, hiding a turn that was acknowledged.
CAUGHT_BY = {
    "no-fence.patch": (
        "checkpoint_fork",
        "acknowledged_turn_missing",
        "message_stored_twice",
        "write_executed_twice",
    ),
    "lost-commit-told-failed.patch": ("write_told_failed_but_ran",),
    "resend-non-idempotent.patch": ("external_write_applied_twice",),
}
# The faults each patch is run under (default: the ones that take a claim away).
FAULTS = {
    "lost-commit-told-failed.patch": "net_lost_reply",
    "resend-non-idempotent.patch": "net_lost_reply",
}
ACTION_OPS = "action_voucher,action_redeem,action_refund,action_decline"
# What else the soak is told for a patch: where its faults land, what the customers do.
EXTRA = {
    "resend-non-idempotent.patch": ["--action-share", "1", "--ops", ACTION_OPS],
}


def planted_copy(patch: Path) -> Path:
    """The committed app/, with the patch applied, in a temp folder."""
    copy = Path(tempfile.mkdtemp(prefix="chaos-selftest-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "HEAD", "app"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(copy)], input=archive, check=True)
    subprocess.run(
        ["patch", "-p1", "--forward", "-d", str(copy), "-i", str(patch)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return copy


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.selftest", description=__doc__)
    parser.add_argument("--patch", type=Path, default=PLANTED / "no-fence.patch")
    parser.add_argument("--duration", default="150s")
    parser.add_argument("--seed", default="31")
    parser.add_argument("--gap", default="2")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "out" / "selftest"
    )
    args = parser.parse_args(argv)
    expected = CAUGHT_BY.get(args.patch.name)
    if expected is None:
        print(f"chaos-selftest: no known invariant for {args.patch.name}", file=sys.stderr)
        return 1
    copy = planted_copy(args.patch.resolve())  # patch -d changes directory first
    try:
        env = {**os.environ, "FAULTS_APP_ROOT": str(copy)}
        soak = subprocess.run(
            [
                sys.executable, "-m", "tests.chaos", "--duration", args.duration,
                "--seed", args.seed, "--gap", args.gap,
                "--faults", FAULTS.get(args.patch.name, "sigstop,kill9"),
                "--out", str(args.out), *EXTRA.get(args.patch.name, []),
            ],
            cwd=ROOT,
            env=env,
        )  # fmt: skip
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    report = args.out / "report.json"
    if soak.returncode not in (0, 1) or not report.exists():
        print(f"chaos-selftest: the soak did not run (exit {soak.returncode})", file=sys.stderr)
        return 1
    counts = {i["name"]: i["count"] for i in json.loads(report.read_text())["invariants"]}
    caught = {name: counts.get(name, 0) for name in expected if counts.get(name, 0) > 0}
    if caught:
        print(f"chaos-selftest: OK, {args.patch.name} caught: {caught} (report: {report})")
        return 0
    print(f"chaos-selftest: MISSED {args.patch.name}: {counts} (report: {report})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
