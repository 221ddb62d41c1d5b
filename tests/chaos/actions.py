"""The soak's external actions: the actions tests' MCP and OpenAPI servers, run as processes.

`loyalty` (MCP: `issue_voucher`, idempotent; `redeem_points`, not) and `billing` (OpenAPI:
`createRefundRequest`, idempotent by its `Idempotency-Key`), from
tests/integration/actions_servers.py. Each appends every write it applied to a journal
(one JSON line, fsynced before it answers), which the checker reads after the run: what
the outside world holds, whatever the service believes. The servers are never faulted;
each replica reaches them through paths of its own in the fault proxy (topology.py), so
a network fault on one replica's action path is that replica's alone.

The actions file names every tool, so a replica that starts while its path is cut still
offers them (docs/actions.md "Sources that misbehave").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.faults import procs
from tests.integration.actions_servers import BILLING_SECRET, LOYALTY_SECRET

IDEMPOTENT = {"issue_voucher": True, "redeem_points": False, "createRefundRequest": True}
# Per call: a write whose answer is lost is resent (idempotent, up to twice) or queued
# for a person after this long, well inside TURN_DEADLINE_S.
TIMEOUT_S = 3
ACTIONS_FILE = f"""
sources:
  - name: loyalty
    mcp: http://${{CHAOS_MCP_ADDRESS}}/mcp
    identity_secret: ${{LOYALTY_IDENTITY_SECRET}}
    customer_argument: customer_id
    timeout_s: {TIMEOUT_S}
    tools:
      issue_voucher:
        kind: write
        idempotent: true
        confirm: "Issue a voucher of {{amount}} to your account"
      redeem_points:
        kind: write
        idempotent: false
        confirm: "Redeem {{points}} of your points"
  - name: billing
    openapi: http://${{CHAOS_HTTP_ADDRESS}}/openapi.json
    base_url: http://${{CHAOS_HTTP_ADDRESS}}
    operations: [createRefundRequest]
    identity_secret: ${{BILLING_IDENTITY_SECRET}}
    customer_argument: customer_id
    timeout_s: {TIMEOUT_S}
    tools:
      createRefundRequest:
        kind: write
        idempotent: true
        confirm: "Request a refund of {{amount}} for invoice {{invoice_id}}"
"""


class ActionServer:
    """One of the two servers, on a free port, stopped by its own pid."""

    def __init__(self, kind: str, out: Path) -> None:
        self.kind = kind
        self.port = procs.free_port()
        self.journal = out / f"actions-{kind}.jsonl"
        self.log = out / f"actions-{kind}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.journal.unlink(missing_ok=True)  # an earlier run's, in the same folder
        # The harness's tree, not FAULTS_APP_ROOT's: the servers are the outside world.
        env = {**os.environ, "PYTHONPATH": str(procs.REPO_ROOT)}
        command = [sys.executable, "-m", "tests.integration.actions_servers", self.kind]
        command += ["--port", str(self.port), "--journal", str(self.journal)]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url + "/_seen", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"the {self.kind} action server did not start: {self.log}")

    def applied(self) -> list[dict[str, Any]]:
        if not self.journal.exists():
            return []
        lines = self.journal.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@dataclass
class ActionServers:
    mcp: ActionServer
    http: ActionServer
    file: Path

    @classmethod
    def start(cls, out: Path) -> ActionServers:
        out = out.resolve()  # the replicas run in a folder of their own
        servers = cls(ActionServer("mcp", out), ActionServer("openapi", out), out / "actions.yaml")
        servers.file.write_text(ACTIONS_FILE, encoding="utf-8")
        try:
            servers.mcp.start()
            servers.http.start()
        except BaseException:
            servers.cleanup()
            raise
        return servers

    def env(self, mcp_address: str, http_address: str) -> dict[str, str]:
        """A replica's settings: the file, the secrets, and its own paths to the servers."""
        return {
            "ACTIONS_FILE": str(self.file),
            "LOYALTY_IDENTITY_SECRET": LOYALTY_SECRET,
            "BILLING_IDENTITY_SECRET": BILLING_SECRET,
            "CHAOS_MCP_ADDRESS": mcp_address,
            "CHAOS_HTTP_ADDRESS": http_address,
        }

    def applied(self) -> list[dict[str, Any]]:
        """Every write either server applied, in the order each applied them."""
        return self.mcp.applied() + self.http.applied()

    def cleanup(self) -> None:
        self.mcp.cleanup()
        self.http.cleanup()
