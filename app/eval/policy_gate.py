"""The gate: a version's test, run through the service itself.

The same tasks run twice with `cs-agent eval`'s machinery (a fresh shop in its own
databases, service processes over HTTP, the simulated or recorded customer): once with the
live version live there, once with the version under test live there. The two runs are
compared as `cs-agent eval compare` compares them; a task that passed every time on live and
failed on the version is a regression. Nothing reaches the service's own database but the
test's row: no customer, route or token can pin a conversation to an unpublished version,
because the version is made live only in the test's own databases.

Tests run in this process's background; one still running when the process stops is marked
failed (run it again).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.errors import AppError
from app.eval import compare
from app.eval.command import EvalConfig, evaluate
from app.eval.tasks import TaskFileError, load_tasks
from app.policies import store

log = structlog.get_logger(__name__)

# The agent's model and behaviour settings a test's services run with: this service's own.
SERVICE_FIELDS = (
    "openai_base_url",
    "openai_api_key",
    "llm_model",
    "write_confirmation",
    "tool_calling",
    "observation_format",
)


def service_env(settings: Settings) -> dict[str, str]:
    env: dict[str, str] = {}
    for name in SERVICE_FIELDS:
        value = getattr(settings, name)
        if value is None:
            continue
        secret = getattr(value, "get_secret_value", None)
        env[name.upper()] = str(secret() if secret else value)
    return env


def installer(row: Mapping[str, Any]) -> Any:
    """Make `row`'s version the only live one in a test's fresh database."""

    async def install(conn: AsyncConnection[Any]) -> None:
        await conn.execute(
            """UPDATE policy_versions SET state = 'retired', percent = NULL
               WHERE state IN ('live', 'candidate') AND version <> %s""",
            (row["version"],),
        )
        await conn.execute(
            """INSERT INTO policy_versions (version, instructions, procedures, note,
                                            created_by, state)
               VALUES (%s, %s, %s, 'under test', 'policy test', 'live')
               ON CONFLICT (version) DO UPDATE SET state = 'live', percent = NULL""",
            (row["version"], row["instructions"], Jsonb(row["procedures"])),
        )

    return install


class PolicyTester:
    def __init__(self, pool: AsyncConnectionPool[Any], settings: Settings, server_url: str):
        self.pool = pool
        self.settings = settings
        self.server_url = server_url  # the tests' databases are created next to it
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def start(self, version: int, tasks: Sequence[Any], actor: str) -> str:
        """Check the tasks, record the test as running, and run it in the background."""
        await store.version_row(self.pool, version)  # 404 for a version that is not there
        folder = Path(tempfile.mkdtemp(prefix="cs-policy-test-"))
        path = folder / "tasks.json"
        path.write_text(json.dumps(list(tasks)), encoding="utf-8")
        try:
            if not load_tasks(path):
                raise TaskFileError("no tasks")
        except TaskFileError as error:
            raise AppError(
                str(error).replace(str(path), "tasks"), code="bad_tasks", status_code=422
            ) from None
        baseline = await store.live_version(self.pool)
        test_id = uuid.uuid4().hex
        await store.start_test(self.pool, test_id, version, baseline, actor)
        task = asyncio.create_task(self._run(test_id, version, baseline, folder))
        self._tasks[test_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(test_id, None))
        return test_id

    async def _run(self, test_id: str, version: int, baseline: int, folder: Path) -> None:
        bound = log.bind(policy_test=test_id, version=version, baseline=baseline)
        status = "failed"
        try:
            runs = {}
            for label, number in (("live", baseline), ("candidate", version)):
                row = await store.version_row(self.pool, number)
                config = EvalConfig(
                    tasks=folder / "tasks.json",
                    out=folder / label,
                    service_env=service_env(self.settings),
                    prepare=installer(row),
                )
                settings = self.settings.model_copy(update={"database_url": self.server_url})
                await evaluate(config, settings, progress=lambda m: bound.debug(m))
                runs[label] = compare.Run.read(folder / label)
            result = compare.compare(runs["live"], runs["candidate"])
            status = "regressed" if result["regressions"] else "passed"
            await store.finish_test(
                self.pool, test_id, status, compare=result, markdown=compare.markdown(result)
            )
            bound.info("policy test finished", status=status)
        except asyncio.CancelledError:
            await asyncio.shield(
                store.finish_test(self.pool, test_id, "failed", error="the service stopped")
            )
            raise
        except Exception as error:
            bound.exception("policy test failed; its runs' logs are kept", folder=str(folder))
            await store.finish_test(
                self.pool, test_id, "failed", error=f"{type(error).__name__}"[:200]
            )
        finally:
            # the comparison is stored with the test; the runs' folders (reports, service
            # logs) go, unless the test failed and its logs may say why
            if status != "failed":
                shutil.rmtree(folder, ignore_errors=True)

    async def wait(self, test_id: str) -> None:
        task = self._tasks.get(test_id)
        if task is not None:
            await asyncio.wait([task])

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks.values()), timeout=10)
