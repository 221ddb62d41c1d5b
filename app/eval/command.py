"""`cs-agent eval`: load the tasks and the shop, bring up the workers, run, write the report."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from time import monotonic

from openai import AsyncOpenAI
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from app.config import Settings
from app.db.seed import generate
from app.db.transfer import TauData, read_dir
from app.eval import report
from app.eval.importer import import_checkout
from app.eval.record import Recorded, RecordOptions, record
from app.eval.runner import CustomerModel, RunOptions, builtin_customer, run_tasks
from app.eval.simulator import OpenAIChat
from app.eval.taskdata import needs_shop, run_data
from app.eval.tasks import Task, TaskFileError, dump_tasks, load_tasks
from app.eval.workers import Prepare, Progress, Workbench

OPENAI_URL = "https://api.openai.com/v1"


@dataclass
class EvalConfig:
    tasks: Path
    out: Path
    data: Path | None = None
    trials: int = 1
    concurrency: int = 1
    guest: bool = False
    max_turns: int = 30
    task_ids: Sequence[str] = ()
    # Laid over the environment of every service process (e.g. the agent model's settings).
    service_env: Mapping[str, str] = field(default_factory=dict)
    prepare: Prepare | None = None  # run on the fresh shop's database (workers.py)


def progress_to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def service_settings(settings: Settings, service_env: Mapping[str, str]) -> Settings:
    """The settings the services will run with: ours, with `service_env` laid over."""
    fields = Settings.model_fields
    overrides = {k.lower(): v for k, v in service_env.items() if k.lower() in fields}
    return settings.model_validate({**settings.model_dump(), **overrides})


@asynccontextmanager
async def customer_model(settings: Settings, tasks: Sequence[Task]) -> AsyncIterator[CustomerModel]:
    """USER_SIM_* when set; else the built-in scripted customer."""
    if not settings.uses_user_sim_model:
        yield builtin_customer(tasks)
        return
    key = settings.user_sim_api_key.get_secret_value() if settings.user_sim_api_key else "none"
    url = settings.user_sim_base_url or OPENAI_URL
    async with AsyncOpenAI(base_url=url, api_key=key, max_retries=3) as client:
        yield CustomerModel(OpenAIChat(client, settings.user_sim_model), settings.user_sim_model)


def select(tasks: list[Task], ids: Sequence[str]) -> list[Task]:
    if not ids:
        return tasks
    unknown = sorted(set(ids) - {t.id for t in tasks})
    if unknown:
        raise TaskFileError(f"no task with id {', '.join(unknown)}")
    return [t for t in tasks if t.id in set(ids)]


async def evaluate(
    config: EvalConfig, settings: Settings, progress: Progress = progress_to_stderr
) -> report.EvalRun:
    if config.trials < 1 or config.concurrency < 1:
        raise ValueError("--trials and --concurrency must be at least 1")
    tasks = select(load_tasks(config.tasks), config.task_ids)
    shop: TauData | None = read_dir(config.data) if config.data else None
    if shop is None and needs_shop(tasks):
        shop = generate()
    data = run_data(tasks, shop)  # recorded tasks bring their own records
    assert settings.database_url, "a database server is needed"
    agent = service_settings(settings, config.service_env)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    started = monotonic()
    async with (
        customer_model(settings, tasks) as customer,
        Workbench(
            server_url=settings.database_url,
            data=data,
            size=min(config.concurrency, len(tasks) * config.trials) or 1,
            log_dir=config.out / "logs",
            service_env=config.service_env,
            progress=progress,
            prepare=config.prepare,
        ) as bench,
    ):
        options = RunOptions(config.trials, config.guest, config.max_turns, progress)
        results = await run_tasks(bench, tasks, customer, options)
    run = report.EvalRun(
        tasks_file=str(config.tasks),
        data=_data_label(config, tasks),
        agent_model="demo (built-in)" if agent.uses_demo_model else agent.llm_model,
        agent_price=report.price_of(
            agent.llm_model, agent.model_prices, builtin=agent.uses_demo_model
        ),
        customer_model=customer.label,
        customer_price=report.price_of(
            customer.model, settings.model_prices, builtin=customer.builtin
        ),
        mode="guest (one-time code)" if config.guest else "the task's customer",
        confirmation=agent.write_confirmation,
        trials=config.trials,
        concurrency=config.concurrency,
        started_at=started_at,
        seconds=monotonic() - started,
        results=results,
    )
    report.write(run, config.out)
    return run


def _data_label(config: EvalConfig, tasks: Sequence[Task]) -> str:
    shop = str(config.data) if config.data else "the seed shop (app/db/seed.py)"
    if not needs_shop(tasks) and not config.data:
        return "the recorded tasks' own records"
    if any(t.data is not None for t in tasks):
        return f"{shop}, with the recorded tasks' own records"
    return shop


async def record_to_file(settings: Settings, options: RecordOptions, out: Path) -> Recorded:
    """Record the conversations (the instruction written by USER_SIM_* when set) and write
    the task file."""
    assert settings.database_url, "a database server is needed"
    async with (
        await AsyncConnection.connect(
            settings.database_url, autocommit=True, row_factory=dict_row
        ) as conn,
        customer_model(settings, []) as customer,
    ):
        recorded = await record(conn, options, None if customer.builtin else customer.chat)
    dump_tasks(recorded.tasks, out)
    return recorded


def import_tau_bench(checkout: Path, split: str, out: Path) -> list[Task]:
    tasks = import_checkout(checkout, split)
    dump_tasks(tasks, out)
    return tasks
