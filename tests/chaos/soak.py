"""The soak: the deployment under steady load and random faults, then settle, then check.

1. Postgres, PgBouncer, the two pools of replicas and their balancers (topology.py), the
   scripted model (model.py) in this process, the soak's shop (shop.py).
2. `clients` simulated customers (scenarios.py), each doing one operation after another
   until the fault phase is over, while the injector (faults.py) breaks things.
3. Faults stop; everything is brought back; the customers finish what they were doing and
   stop; then the system must settle: every replica ready, no run running, no lease held,
   no webhook pending, and a fresh read answered through each balancer.
4. The checker (checker.py) counts every broken promise; the report (report.py) says what
   happened. The exit code is 1 when any count is not 0.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.chaos.checker import Checker, Invariant
from tests.chaos.client import Client, Cuts, GaveUp
from tests.chaos.faults import ACTION_PATH_SHARE, WEIGHTS, Injector
from tests.chaos.model import ChaosModel
from tests.chaos.receiver import WebhookReceiver
from tests.chaos.records import Records, now
from tests.chaos.scenarios import CONFIRM_OPS, DIRECT_OPS, Context, Op, read_order
from tests.chaos.shop import Shop
from tests.chaos.topology import ChaosDeployment
from tests.fakellm import Latency, ScriptedModelServer
from tests.scale.topology import bearer

CUSTOMERS_PER_CLIENT = 10
# Pending orders per customer: a 30-minute soak cancels about 8 of each customer's; when
# they run out, a customer reads its profile instead.
ORDERS_EACH = 60
FINISH_S = 150.0  # the customers' last operations, after the faults
SETTLE_S = 120.0


@dataclass
class Settings:
    duration_s: float
    seed: int
    out: Path
    clients: int = 12
    direct_clients: int = 4
    gap_s: float = 3.0
    kinds: list[str] = field(default_factory=lambda: list(WEIGHTS))
    ops: list[str] | None = None  # the `confirm` clients' operations (None: all of them)
    action_share: float = ACTION_PATH_SHARE  # of the net faults that may hit an action path


@dataclass
class Outcome:
    settings: Settings
    records: Records
    injector: Injector
    invariants: list[Invariant]
    fault_phase: tuple[float, float]  # monotonic
    clients_done_s: float  # after the last fault ended
    settled_s: float | None
    wall_s: float

    @property
    def violations(self) -> int:
        return sum(i.count for i in self.invariants)


def customers_loop(
    client: Client,
    customers: list[str],
    ops: list[tuple[Op, int]],
    rng: random.Random,
    stop: asyncio.Event,
) -> asyncio.Task[None]:
    tokens = {c: bearer(c) for c in customers}

    async def loop() -> None:
        kinds = [op for op, _ in ops]
        weights = [w for _, w in ops]
        while not stop.is_set():
            client.customer = rng.choice(customers)
            client.headers = tokens[client.customer]
            op = rng.choices(kinds, weights)[0]
            kind = op.__name__
            try:
                outcome = await op(Context(client, kind, rng))
            except GaveUp as error:
                outcome = "gave up"
                client.records.unfinished.append(f"gave up: {error}")
            except AssertionError as error:
                outcome = f"unexpected answer: {str(error)[:120]}"
            client.records.ops[(kind, outcome)] += 1
            await asyncio.sleep(rng.uniform(0.1, 0.6))

    return asyncio.create_task(loop())


async def wait_settled(deployment: ChaosDeployment, records: Records, shop: Shop) -> bool:
    """Every replica ready, no lease naming a run, a read answered in each pool."""
    deadline = now() + SETTLE_S
    pg = deployment.postgres
    async with httpx.AsyncClient(timeout=10) as http:
        while now() < deadline:
            try:
                ready = [
                    (await http.get(r.url + "/readyz")).status_code == 200
                    for r in deployment.replicas
                ]
                busy = await asyncio.to_thread(
                    pg.query,
                    # A lease of a dead process names its run until the replicas' sweep
                    # frees it, within about three lease TTLs (app/runs/poller.py); one
                    # still there when the settle gives up is the checker's to count.
                    # A webhook held by a fault goes out at its next try (a few seconds).
                    "SELECT (SELECT count(*) FROM thread_leases WHERE run_id IS NOT NULL)"
                    " + (SELECT count(*) FROM webhook_outbox"
                    "    WHERE delivered_at IS NULL AND failed_at IS NULL)",
                )
                if all(ready) and busy[0][0] == 0:
                    break
            except (httpx.HTTPError, OSError):
                pass
            await asyncio.sleep(0.5)
        else:
            return False
    probe = Records()
    for pool in ("confirm", "direct"):
        async with httpx.AsyncClient(base_url=deployment.url(pool), timeout=30) as http:
            customer = shop.customers[0]
            client = Client(http, customer, bearer(customer), pool, probe, Cuts(0), shop)
            ctx = Context(client, "probe", random.Random(0))
            if await read_order(ctx) != "completed":
                return False
    return True


async def soak(settings: Settings) -> Outcome:
    wall = time.monotonic()
    settings.out.mkdir(parents=True, exist_ok=True)
    logs = settings.out / "logs"
    shutil.rmtree(logs, ignore_errors=True)  # an earlier run's, in the same folder
    (settings.out / "evidence.txt").unlink(missing_ok=True)
    logs.mkdir()
    rng = random.Random(settings.seed)
    shop = Shop.plan(settings.clients * CUSTOMERS_PER_CLIENT, ORDERS_EACH)
    model = ChaosModel(rng.randrange(2**32))
    latency = Latency(ttft_ms=30, tokens_per_s=40)
    records = Records()
    cuts = Cuts(rng.randrange(2**32))
    receiver = WebhookReceiver()
    with ScriptedModelServer(model, latency=latency, record=False) as server, receiver:
        deployment = ChaosDeployment(
            server.base_url, logs, receiver.port, seed=rng.randrange(2**32)
        )
        try:
            await asyncio.to_thread(deployment.start)  # migrations run their own loop
            await asyncio.to_thread(shop.insert, deployment.postgres.url)
            injector = Injector(
                deployment,
                model,
                cuts,
                rng.randrange(2**32),
                settings.kinds,
                settings.gap_s,
                settings.action_share,
            )
            outcome = await _drive(
                settings, deployment, shop, records, cuts, injector, rng, receiver
            )
        finally:
            _keep_logs(deployment, logs)
            await asyncio.to_thread(deployment.cleanup)
    outcome.wall_s = time.monotonic() - wall
    return outcome


async def _drive(
    settings: Settings,
    deployment: ChaosDeployment,
    shop: Shop,
    records: Records,
    cuts: Cuts,
    injector: Injector,
    rng: random.Random,
    receiver: WebhookReceiver,
) -> Outcome:
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
    timeout = httpx.Timeout(60, connect=5)
    https = {
        pool: httpx.AsyncClient(base_url=deployment.url(pool), limits=limits, timeout=timeout)
        for pool in ("confirm", "direct")
    }
    tasks = []
    clients: list[Client] = []
    for i in range(settings.clients):
        pool = "direct" if i < settings.direct_clients else "confirm"
        ops = DIRECT_OPS if pool == "direct" else CONFIRM_OPS
        if pool == "confirm" and settings.ops is not None:
            ops = [(op, w) for op, w in ops if op.__name__ in settings.ops]
        # Each client has customers of its own: one customer's threads are one client's.
        mine = shop.customers[i * CUSTOMERS_PER_CLIENT : (i + 1) * CUSTOMERS_PER_CLIENT]
        client = Client(https[pool], mine[0], bearer(mine[0]), pool, records, cuts, shop)
        tasks.append(customers_loop(client, mine, ops, random.Random(rng.random()), stop))
        clients.append(client)
    started = records.started = now()  # the report's clock starts with the load
    await injector.run(settings.duration_s)
    await injector.restore()
    ended = injector.last_end()
    stop.set()
    _, unfinished = await asyncio.wait(tasks, timeout=FINISH_S)
    for task, client in zip(tasks, clients, strict=True):
        if task in unfinished:
            records.unfinished.append(records.waiting.get(id(client), client.customer))
            task.cancel()
    clients_done = now() - ended
    settled = await wait_settled(deployment, records, shop)
    settled_s = now() - ended if settled else None
    for http in https.values():
        await http.aclose()
    for path in deployment.net.paths.values():
        for name, n in vars(path.stats).items():
            if name in ("resets", "lost_replies", "refused") and n:
                key = f"proxy: {name.replace('_', ' ')} ({path.name.split()[-1]} paths)"
                records.events[key] += n
    checker = Checker(
        deployment.postgres,
        deployment.url("confirm"),
        records,
        injector.log,
        receiver,
        deployment.actions,
    )
    invariants = await asyncio.to_thread(checker.run)
    records.events.update({f"checker: {k}": n for k, n in checker.info.items()})
    if checker.evidence:
        evidence = settings.out / "evidence.txt"
        evidence.write_text("\n\n".join("\n".join(lines) for lines in checker.evidence.values()))
    return Outcome(
        settings, records, injector, invariants, (started, ended), clients_done, settled_s, 0.0
    )


def _keep_logs(deployment: ChaosDeployment, logs: Path) -> None:
    for name, path in deployment.logs().items():
        if path.exists() and path.parent != logs:
            shutil.copy(path, logs / f"{name.split()[0]}.log")
