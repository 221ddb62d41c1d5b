"""`make compose-test`: docker-compose.yml, built and run for real with podman.

    python -m tests.compose            # the last line says `compose-test: OK` or why not

1. podman's settings for hosts like this one (.compose-test/containers.conf: the runc
   runtime, no default ulimits), and `compose-test: SKIPPED (...)` if podman cannot run a
   container here.
2. The stand-in base images (deploy/standins/), built from Debian's archive when missing
   or when their recipe changed, and tagged with the names the files use.
3. The scripted model (tests/compose/policy.py) on the host, for every replica.
4. `podman-compose up -d --build --scale app=3` from docker-compose.yml (plus
   tests/compose/compose.test.yml: the model's address, a 3 s lease), then health: every
   replica's own health check, and /readyz through the load balancer's published port.
5. The demo shop (`run --rm migrate python -m app seed`, as README says), then CONVERSATIONS
   customers at once, each asking to cancel one pending order: the message stops for the
   confirmation; the approval runs the write and streams the answer. While the answers
   stream, one replica is killed (`podman kill`); a third of the clients also let go of
   their stream on purpose. Every client must finish its turn by following its run again
   (Content-Location + /stream with Last-Event-ID) and, for a run that died with its
   replica, sending the approval again.
6. The database (psql in the db container): one tool execution per conversation, every
   order cancelled once with one refund, no checkpoint chain forked, no run left running.
7. `podman-compose down -v`, whatever happened.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.api.auth import issue_token
from tests.compose.client import Step, step
from tests.compose.policy import ANSWER

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".compose-test"
STANDINS = ROOT / "deploy" / "standins"
PROJECT = os.environ.get("COMPOSE_TEST_PROJECT", "csagent-compose-test")
# The tree whose docker-compose.yml runs (a broken copy, to see this test fail on it).
STACK = Path(os.environ.get("COMPOSE_TEST_DIR", ROOT)).resolve()
PODMAN_COMPOSE = CACHE / "venv" / "bin" / "podman-compose"
JWT_SECRET = "compose-test-secret-compose-test-secret-0123"
REPLICAS = 3
CONVERSATIONS = 12
LET_GO = 3  # every third client leaves its answer's stream after this many tokens
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# Podman's build: Docker's image format (OCI has no HEALTHCHECK), the host's network.
BUILD_ARGS = "--format docker --network host"
# The host's own CAs, added to the python stand-in's bundle (a TLS-inspecting proxy).
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
POSTGRES_IMAGE = "localhost/cs-agent-standin/postgres:15"
HAPROXY_IMAGE = "localhost/cs-agent-standin/haproxy:2.6"
RECIPE_LABEL = "cs-agent.standin.recipe"


class Skip(Exception):
    """podman cannot run here: the run prints SKIPPED and exits 0."""


def log(message: str) -> None:
    print(f"compose-test: {message}", flush=True)


# --- podman --------------------------------------------------------------------------------


def podman_env() -> dict[str, str]:
    """podman's settings for this kind of host, for every podman and podman-compose call."""
    CACHE.mkdir(exist_ok=True)
    conf = CACHE / "containers.conf"
    conf.write_text(
        "# Written by tests/compose (README: Run with Docker or podman).\n"
        "[containers]\n"
        "# The default nofile ulimit may not be raised on this host.\n"
        "default_ulimits = []\n"
        "[engine]\n"
        "# crun refuses hybrid cgroups; runc does not.\n"
        'runtime = "runc"\n'
    )
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


ENV: dict[str, str] = {}


def sh(
    args: Sequence[str],
    *,
    check: bool = True,
    quiet: bool = False,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    if not quiet:
        print("+ " + shlex.join(args), flush=True)
    done = subprocess.run(
        list(args),
        env=env or ENV,
        capture_output=True,
        text=stdin is None,
        input=stdin,
        timeout=timeout,
        check=False,
    )
    if stdin is not None:  # bytes in, so bytes out
        done = subprocess.CompletedProcess(
            done.args, done.returncode, _text(done.stdout), _text(done.stderr)
        )
    if check and done.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(args)} exited {done.returncode}:\n{done.stdout[-4000:]}"
            f"\n{done.stderr[-4000:]}"
        )
    return done


def _text(data: Any) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else str(data or "")


def podman(*args: str, check: bool = True, quiet: bool = True) -> str:
    return sh(["podman", *args], check=check, quiet=quiet).stdout


def image_exists(name: str) -> bool:
    return sh(["podman", "image", "exists", name], check=False, quiet=True).returncode == 0


def check_podman() -> None:
    if shutil.which("podman") is None:
        raise Skip("podman is not installed: apt-get install podman runc debootstrap")
    info = sh(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], check=False)
    if info.returncode != 0:
        raise Skip(f"podman info failed: {(info.stderr or info.stdout).strip()[-300:]}")
    if shutil.which("debootstrap") is None and not image_exists(
        "docker.io/library/python:3.11-slim"
    ):
        raise Skip("debootstrap is not installed (it builds the stand-in base images)")


# --- stand-in images -----------------------------------------------------------------------


@dataclass(frozen=True)
class Standin:
    tag: str
    recipe: str  # a folder of deploy/standins/
    base: str  # the image it is built FROM (a rootfs import or another stand-in)


ROOTFS = {
    # imported debootstrap roots: the tag, and debootstrap's --include
    "localhost/cs-agent-standin/rootfs-minbase": "",
    "localhost/cs-agent-standin/rootfs-python": "python3,python3-venv,python3-pip,ca-certificates",
}
STANDIN_IMAGES = [
    Standin(
        "docker.io/library/debian:bookworm-slim",
        "debian",
        "localhost/cs-agent-standin/rootfs-minbase",
    ),
    Standin(
        "docker.io/library/python:3.11-slim", "python", "localhost/cs-agent-standin/rootfs-python"
    ),
    Standin(POSTGRES_IMAGE, "postgres", "docker.io/library/debian:bookworm-slim"),
    Standin(HAPROXY_IMAGE, "haproxy", "docker.io/library/debian:bookworm-slim"),
]


def recipe_hash(standin: Standin) -> str:
    digest = hashlib.sha256()
    folder = STANDINS / standin.recipe
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    base = podman("image", "inspect", "--format", "{{.Id}}", standin.base).strip()
    digest.update(base.encode())
    if standin.recipe == "python":
        for ca in sorted(LOCAL_CAS.glob("*.crt")):
            digest.update(ca.read_bytes())
    return digest.hexdigest()[:16]


def debootstrap_import(tag: str, include: str) -> None:
    """A Debian bookworm minbase root, imported as `tag` (the apt cache left out)."""
    root = CACHE / ("rootfs-" + tag.rsplit("/", 1)[1])
    shutil.rmtree(root, ignore_errors=True)
    started = time.monotonic()
    args = ["debootstrap", "--variant=minbase"]
    if include:
        args.append(f"--include={include}")
    sh([*args, "bookworm", str(root), DEBIAN_MIRROR], timeout=1800)
    for deb in (root / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        deb.unlink()
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    assert tar.stdout is not None
    imported = subprocess.run(
        ["podman", "import", "-q", "-", tag], stdin=tar.stdout, env=ENV, capture_output=True
    )
    tar.wait()
    if imported.returncode != 0 or tar.returncode != 0:
        raise RuntimeError(f"podman import {tag}: {imported.stderr.decode()[-2000:]}")
    shutil.rmtree(root)
    log(f"built {tag} with debootstrap in {time.monotonic() - started:.0f}s")


def ensure_images() -> None:
    """Every stand-in, built only when it is missing or its recipe (or base) changed."""
    missing = [tag for tag in ROOTFS if not image_exists(tag)]
    if missing:
        if shutil.which("debootstrap") is None:
            raise RuntimeError("debootstrap is needed to build " + ", ".join(missing))
        # Both at once: each is mostly waiting on the mirror.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(missing)) as pool:
            list(pool.map(lambda tag: debootstrap_import(tag, ROOTFS[tag]), missing))
    for standin in STANDIN_IMAGES:
        wanted = recipe_hash(standin)
        if image_exists(standin.tag):
            label = podman(
                "image",
                "inspect",
                "--format",
                f'{{{{index .Labels "{RECIPE_LABEL}"}}}}',
                standin.tag,
            ).strip()
            if label == wanted:
                continue
        started = time.monotonic()
        cas = (
            ["-v", f"{LOCAL_CAS}:{LOCAL_CAS}:ro"]
            if standin.recipe == "python" and LOCAL_CAS.is_dir()
            else []
        )
        sh(
            [
                "podman", "build", "-q", "--format", "docker", "--network", "host", *cas,
                "--label", f"{RECIPE_LABEL}={wanted}",
                "-t", standin.tag, str(STANDINS / standin.recipe),
            ],
            timeout=1800,
        )  # fmt: skip
        log(f"built {standin.tag} in {time.monotonic() - started:.0f}s")


# --- the stack -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def compose(*args: str, check: bool = True, timeout: float | None = None) -> str:
    command = [
        str(PODMAN_COMPOSE),
        "-p", PROJECT,
        "--in-pod", "false",
        "-f", str(STACK / "docker-compose.yml"),
        "-f", str(ROOT / "tests" / "compose" / "compose.test.yml"),
        "--podman-build-args", BUILD_ARGS,
        *args,
    ]  # fmt: skip
    done = sh(command, check=False, timeout=timeout)
    output = done.stdout + done.stderr
    if check and done.returncode != 0:
        raise RuntimeError(
            f"podman-compose {' '.join(args)} exited {done.returncode}:\n{output[-6000:]}"
        )
    return output


def containers(service: str | None = None, *, all_states: bool = False) -> list[str]:
    args = [
        "ps",
        "--format",
        "{{.Names}}",
        "--filter",
        f"label=io.podman.compose.project={PROJECT}",
    ]
    if service is not None:
        args += ["--filter", f"label=com.docker.compose.service={service}"]
    if all_states:
        args.append("-a")
    return sorted(podman(*args).split())


def healthy(container: str) -> bool:
    """podman runs a container's health check from a systemd timer; with no systemd (as
    here) nothing runs it, so it is run here, as the timer would."""
    return sh(["podman", "healthcheck", "run", container], check=False, quiet=True).returncode == 0


def wait_until(what: str, ok: Any, timeout: float, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def psql(sql: str) -> list[list[str]]:
    db = containers("db")[0]
    out = podman(
        "exec", db, "psql", "-U", "csagent", "-d", "csagent", "-v", "ON_ERROR_STOP=1",
        "-At", "-F", "\t", "-c", sql,
    )  # fmt: skip
    return [line.split("\t") for line in out.splitlines() if line]


def lb_ok(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def exited(container: str) -> bool:
    return podman("inspect", "--format", "{{.State.Status}}", container).strip() == "exited"


def bring_up(url: str) -> dict[str, float]:
    """`up --build --scale app=3`, one service at a time in depends_on's order, each
    condition waited for here: podman 4.3 cannot keep them itself. podman-compose ignores
    `service_healthy` before podman 4.6, and its `--requires` links make podman refuse to
    start a replica once the one-shot `migrate` has exited ("generating dependency graph
    ... not found in input list") and refuse to remove the containers at `down`. So every
    `up` is `--no-deps` (no links), in the order docker compose would start them."""
    timings: dict[str, float] = {}
    started = time.monotonic()

    def up(service: str, *extra: str) -> None:
        compose("up", "-d", "--build", "--no-deps", *extra, service, timeout=3600)

    up("db")
    wait_until("the database's health check", lambda: healthy(containers("db")[0]), 120)
    timings["db healthy"] = time.monotonic() - started
    up("migrate")
    migrate = containers("migrate", all_states=True)
    wait_until("migrate to finish", lambda: exited(migrate[0]), 600)
    status = podman("inspect", "--format", "{{.State.ExitCode}}", *migrate).split()
    assert status == ["0"], f"migrate exited {status}: {podman('logs', *migrate, check=False)}"
    timings["migrated"] = time.monotonic() - started
    up("pgbouncer")
    up("app", "--scale", f"app={REPLICAS}")
    apps = containers("app")
    assert len(apps) == REPLICAS, f"{REPLICAS} app replicas wanted, running: {apps}"
    for app in apps:
        wait_until(f"{app}'s health check", lambda app=app: healthy(app), 120)
    timings["replicas healthy"] = time.monotonic() - started
    up("lb")
    wait_until("/readyz through the load balancer", lambda: lb_ok(url), 60, every=0.5)
    timings["load balancer ready"] = time.monotonic() - started
    return timings


def tear_down() -> bool:
    """`down -v`; then whatever it left (it should leave nothing), removed by label. True
    when `down` left nothing behind."""
    output = compose("down", "-v", "--remove-orphans", check=False, timeout=600)
    clean = not containers(all_states=True)
    if not clean:
        print(output[-3000:])
    for _ in range(5):
        left = containers(all_states=True)
        if not left:
            break
        log(f"down left containers behind, removing them: {left}")
        sh(["podman", "rm", "-f", "-t", "0", *left], check=False, quiet=True)
    label = f"label=io.podman.compose.project={PROJECT}"
    for kind in ("volume", "network"):
        names = podman(kind, "ls", "-q", "--filter", label, check=False).split()
        if names:
            log(f"down left {kind}s behind, removing them: {names}")
            sh(["podman", kind, "rm", "-f", *names], check=False, quiet=True)
            clean = False
    return clean


@contextmanager
def model_server(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """The scripted model on the host, on every address (the containers' gateway)."""
    args = [
        sys.executable, "-m", "tests.fakellm", "--host", "0.0.0.0", "--port", str(port),
        "--policy", "tests.compose.policy:CancelPolicy", "--ttft-ms", "50", "--tps", "12",
    ]  # fmt: skip
    out = open(CACHE / "fakellm.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(
            "the scripted model",
            lambda: _answers(f"http://127.0.0.1:{port}/v1/models"),
            20,
            every=0.2,
        )
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        out.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


def bearer(customer: str) -> dict[str, str]:
    token = issue_token(JWT_SECRET, customer, role="customer", ttl_s=3600)
    return {"Authorization": f"Bearer {token}"}


# --- the conversations ---------------------------------------------------------------------


@dataclass
class Conversation:
    session: str
    customer: str
    order: str
    message: Step | None = None
    approval: Step | None = None

    @property
    def thread(self) -> str:
        return f"{self.customer}:{self.session}"


async def converse_all(url: str, conversations: list[Conversation], victim: str) -> float:
    """Every conversation to its end; `victim` is killed while the answers stream. Returns
    when (seconds after the approvals were sent) the kill happened."""
    tokens_seen = [asyncio.Event() for _ in conversations]
    timeout = httpx.Timeout(60, connect=5)
    limits = httpx.Limits(max_connections=4 * len(conversations))
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as http:

        async def one(i: int, c: Conversation) -> None:
            headers = bearer(c.customer)
            base = f"/threads/{c.session}"
            body = {"content": f"Please cancel order {c.order}", "client_message_id": "m1"}
            c.message = await step(http, headers, base + "/messages", body, want="interrupted")
            assert "interrupt" in c.message.last.events, c.message
            await approvals_sent.wait()
            c.approval = await step(
                http,
                headers,
                base + "/resume",
                {"decision": "approve"},
                want="completed",
                let_go_after_tokens=LET_GO if i % 3 == 0 else None,
                on_token=tokens_seen[i],
            )

        approvals_sent = asyncio.Event()
        tasks = [asyncio.create_task(one(i, c)) for i, c in enumerate(conversations)]
        # Every message stops for its confirmation, then every approval goes at once.
        while not all(c.message is not None for c in conversations):
            if any(t.done() and t.exception() for t in tasks):
                break
            await asyncio.sleep(0.1)
        approvals_sent.set()
        sent = time.monotonic()
        # Kill once most answers are streaming: the victim has some of them (leastconn).
        while sum(e.is_set() for e in tokens_seen) < len(conversations) * 2 // 3:
            if time.monotonic() - sent > 60 or any(t.done() and t.exception() for t in tasks):
                break
            await asyncio.sleep(0.05)
        killed_at = time.monotonic() - sent
        await asyncio.to_thread(podman, "kill", victim)
        log(f"killed {victim} {killed_at:.1f}s after the approvals were sent")
        await asyncio.gather(*tasks)
    return killed_at


def check_forwarded_for(url: str) -> None:
    """The replicas believe the balancer's X-Forwarded-For (TRUSTED_PROXIES holds its
    address): a public route's per-IP rate limit counts the client, not the balancer."""
    lb = containers("lb")[0]
    lb_ips = set(
        podman(
            "inspect", "--format",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", lb,
        ).split()
    )  # fmt: skip
    assert httpx.get(url + "/help?q=refund", timeout=10).status_code == 200
    keys = {row[0] for row in psql("SELECT key FROM rate_limits WHERE key LIKE 'public:%'")}
    counted = {key.split(":", 1)[1] for key in keys}
    assert counted and not counted & lb_ips, (
        f"the public rate limit counts {sorted(counted)}; the balancer is {sorted(lb_ips)}:"
        " the replicas do not believe its X-Forwarded-For (TRUSTED_PROXIES)"
    )
    log(f"X-Forwarded-For believed: the client counted as {sorted(counted)}, not {sorted(lb_ips)}")


def check(url: str, conversations: list[Conversation], refunds_before: dict[str, int]) -> None:
    threads = {c.thread: c for c in conversations}
    quoted = ", ".join(f"'{t}'" for t in threads)
    # Every client finished, and the kill hit running streams.
    for c in conversations:
        assert c.message is not None and c.approval is not None, c
        assert c.approval.status == "completed", c
        text = "".join(c.approval.last.tokens)
        assert text in ("", ANSWER), (c.session, text)  # "": a replayed turn
        for run in [*c.message.runs, *c.approval.runs]:
            # A stream followed again with Last-Event-ID sent only events after it.
            assert run.ids == sorted(set(run.ids)), (c.session, run.location, run.ids)
    let_go = [c for i, c in enumerate(conversations) if i % 3 == 0]
    cut = [c for i, c in enumerate(conversations) if i % 3 and c.approval and c.approval.broken]
    assert all(c.approval and c.approval.follows >= 1 for c in let_go)
    assert cut, "the kill cut no client's stream"
    assert all(c.approval and c.approval.follows >= 1 for c in cut)
    followed_on = [c for c in let_go if c.approval and not c.approval.abandoned]
    for c in followed_on:  # left on purpose, followed on a live replica: the whole answer
        assert c.approval is not None and "".join(c.approval.last.tokens) == ANSWER, c

    # Every write exactly once.
    executions = psql(
        "SELECT thread_id, count(*), bool_and(ok), min(tool_name) FROM tool_executions"
        f" WHERE thread_id IN ({quoted}) GROUP BY 1"
    )
    assert {row[0] for row in executions} == set(threads), executions
    assert {tuple(row[1:]) for row in executions} == {("1", "t", "cancel_pending_order")}, (
        executions
    )
    orders = ", ".join(f"'{c.order}'" for c in conversations)
    statuses = psql(f"SELECT id, status FROM orders WHERE id IN ({orders})")
    assert {row[1] for row in statuses} == {"cancelled"} and len(statuses) == len(conversations)
    refunds = dict(
        (row[0], int(row[1]))
        for row in psql(
            "SELECT order_id, count(*) FROM payment_transactions"
            f" WHERE order_id IN ({orders}) AND transaction_type = 'refund' GROUP BY 1"
        )
    )
    for c in conversations:
        assert refunds.get(c.order, 0) == refunds_before.get(c.order, 0) + 1, (c, refunds)

    # No chain forked, no run left running.
    forks = psql(
        f"SELECT thread_id FROM checkpoints WHERE thread_id IN ({quoted})"
        " AND checkpoint_ns = '' AND parent_checkpoint_id IS NOT NULL"
        " GROUP BY thread_id, parent_checkpoint_id HAVING count(*) > 1"
    )
    assert forks == [], forks
    running = psql(
        f"SELECT count(*) FROM runs WHERE thread_id IN ({quoted}) AND status = 'running'"
    )
    assert running == [["0"]], running

    # The message once, the answer last, nothing pending.
    with httpx.Client(base_url=url, timeout=30) as http:
        for c in conversations:
            state = http.get(f"/threads/{c.session}/state", headers=bearer(c.customer)).json()
            said = [m["content"] for m in state["messages"] if m["role"] == "user"]
            assert said == [f"Please cancel order {c.order}"], (c.session, said)
            assert state["messages"][-1]["content"] == ANSWER, (c.session, state["messages"][-1])
            assert state["pending"] is None, (c.session, state["pending"])


def summary(conversations: list[Conversation]) -> str:
    approvals = [c.approval for c in conversations if c.approval is not None]
    return (
        f"{len(conversations)} conversations; approvals: posts {sum(a.posts for a in approvals)},"
        f" broken streams {sum(a.broken for a in approvals)},"
        f" follows {sum(a.follows for a in approvals)},"
        f" run_lost {sum(a.run_lost for a in approvals)},"
        f" abandoned {sum(a.abandoned for a in approvals)}, 409s {sum(a.busy for a in approvals)},"
        f" 502/503s {sum(a.bad_gateway for a in approvals)}"
    )


def run() -> None:
    started = time.monotonic()
    ENV.update(podman_env())
    check_podman()
    if not PODMAN_COMPOSE.exists():
        raise RuntimeError(f"{PODMAN_COMPOSE} is missing: run `make compose-test`")
    ensure_images()
    images_done = time.monotonic()
    host_port, model_port = free_port(), free_port()
    url = f"http://127.0.0.1:{host_port}"
    ENV.update(
        JWT_SECRET=JWT_SECRET,
        HOST_PORT=str(host_port),
        POSTGRES_IMAGE=POSTGRES_IMAGE,
        HAPROXY_IMAGE=HAPROXY_IMAGE,
        COMPOSE_TEST_MODEL_URL=f"http://host.containers.internal:{model_port}/v1",
    )
    tear_down()  # a previous run's leftovers
    try:
        with model_server(model_port):
            timings = bring_up(url)
            log(
                "up: "
                + ", ".join(f"{k} after {v:.0f}s" for k, v in timings.items())
                + f" ({REPLICAS} replicas)"
            )
            image = podman("image", "inspect", "--format", "{{.Size}}", f"{PROJECT}_app").strip()
            log(f"app image {int(image) / 1e6:.0f} MB")
            print(
                compose("run", "--rm", "migrate", "python", "-m", "app", "seed", timeout=600)[-300:]
            )
            pending = psql(
                "SELECT id, customer_id FROM orders WHERE status = 'pending' ORDER BY id"
                f" LIMIT {CONVERSATIONS}"
            )
            assert len(pending) == CONVERSATIONS, f"the shop has {len(pending)} pending orders"
            tag = f"ct{os.getpid()}"
            conversations = [
                Conversation(f"{tag}-{i:02d}", customer, order)
                for i, (order, customer) in enumerate(pending)
            ]
            refunds_before = dict(
                (row[0], int(row[1]))
                for row in psql(
                    "SELECT order_id, count(*) FROM payment_transactions"
                    " WHERE transaction_type = 'refund' GROUP BY 1"
                )
            )
            victim = containers("app")[1]
            began = time.monotonic()
            asyncio.run(converse_all(url, conversations, victim))
            log(summary(conversations) + f", in {time.monotonic() - began:.1f}s")
            check(url, conversations, refunds_before)
            check_forwarded_for(url)
            log("every write ran exactly once; every stream resumed to its answer")
    except BaseException:
        print(compose("ps", check=False, timeout=60))
        for name in containers(all_states=True):
            print(f"--- logs of {name} (tail) ---")
            logs = sh(["podman", "logs", "--tail", "40", name], check=False, quiet=True)
            print((logs.stdout + logs.stderr)[-3000:])
        raise
    finally:
        clean = tear_down()
    assert clean, "`down -v` left containers, volumes or networks behind"
    log(
        f"images ready in {images_done - started:.0f}s, whole run {time.monotonic() - started:.0f}s"
    )


def main() -> int:
    # A stopped `make` (SIGTERM) still runs `down -v`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        run()
    except Skip as reason:
        print(f"compose-test: SKIPPED ({reason})", flush=True)
        return 0
    except (AssertionError, RuntimeError, subprocess.TimeoutExpired) as failure:
        print(f"compose-test: FAILED: {failure}", file=sys.stderr, flush=True)
        print("compose-test: FAILED", flush=True)
        return 1
    print("compose-test: OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
