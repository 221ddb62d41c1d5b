"""docker-compose.yml and deploy/ hold together (no Docker engine here to bring them up).

The topology itself is exercised from processes by test_many_replicas.py; this checks what
only the compose file says: who connects where, what waits for what, and that the files it
mounts or builds exist and parse (HAProxy checks its own configuration).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml  # type: ignore[import-untyped]

from tests.faults import procs
from tests.scale.topology import PGBOUNCER_INI, pgbouncer_settings

ROOT = procs.REPO_ROOT


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    found: dict[str, Any] = compose["services"]
    return found


def host_of(url: str) -> str:
    parts = urlsplit(url.replace("${POSTGRES_PASSWORD:-csagent}", "pw"))
    return f"{parts.hostname}:{parts.port}"


class TestCompose:
    def test_the_replicas_reach_postgres_through_pgbouncer_without_prepared_statements(
        self, services: dict[str, Any]
    ) -> None:
        app = services["app"]
        assert host_of(app["environment"]["DATABASE_URL"]) == "pgbouncer:6432"
        assert app["environment"]["DB_PREPARE_THRESHOLD"] == "none"
        assert pgbouncer_settings()["pool_mode"] == "transaction"
        databases = (PGBOUNCER_INI.read_text().split("[databases]")[1]).split("[")[0]
        assert "host=db port=5432" in databases

    def test_migrations_run_once_directly_before_any_replica_starts(
        self, services: dict[str, Any]
    ) -> None:
        migrate = services["migrate"]
        assert migrate["command"] == ["python", "-m", "app", "migrate"]
        assert host_of(migrate["environment"]["DATABASE_URL"]) == "db:5432"
        assert services["app"]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
        assert "--no-seed" in services["app"]["command"]

    def test_replicas_can_be_scaled_behind_the_load_balancer(
        self, services: dict[str, Any]
    ) -> None:
        app, lb = services["app"], services["lb"]
        assert "ports" not in app and "container_name" not in app  # --scale app=N
        assert "./deploy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in lb["volumes"]
        published = lb["ports"][0].rsplit(":", 1)[1]
        assert published == lb["environment"]["LB_PORT"]
        config = (ROOT / "deploy" / "haproxy.cfg").read_text()
        assert "server-template app" in config and "app:8000" in config
        assert set(lb["networks"]) <= set(app["networks"])

    def test_what_compose_builds_and_mounts_exists(self, services: dict[str, Any]) -> None:
        assert (ROOT / services["app"]["build"] / "Dockerfile").is_file()
        assert (ROOT / services["pgbouncer"]["build"] / "Dockerfile").is_file()
        assert (ROOT / services["pgbouncer"]["build"] / "entrypoint.sh").stat().st_mode & 0o111

    @pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy: make scale-deps")
    def test_haproxy_accepts_the_deployed_configuration(self) -> None:
        env = {**os.environ, "LB_PORT": "8080"}
        check = subprocess.run(
            ["haproxy", "-c", "-f", str(ROOT / "deploy" / "haproxy.cfg")],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert check.returncode == 0, check.stdout + check.stderr
