"""The Dockerfile's build steps, run outside Docker so they cannot rot.

The wheel is built as the Dockerfile's first stage builds it (`pip wheel --no-deps .` from
pyproject.toml, README.md and app/ alone), installed into a fresh virtual environment and
run from a folder outside the repository with no PYTHONPATH: `python -m app migrate` on a
fresh database finds the migrations inside the package, and `cs-agent serve` answers
/readyz (migrations at head), the chat page and a help article, which are package data too.

The quick case borrows the dependencies from this .venv (a .pth line; the editable install
of the app in it is not read); the slow one installs them from the index under
constraints.txt, as the image does (about 2.5 minutes: `make scale-test`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.db.migrate import current_revision, head_revision
from tests.faults import procs
from tests.pg import create_fresh_database, drop_database

ROOT = procs.REPO_ROOT
# What the Dockerfile's wheel stage copies.
SOURCES = ("pyproject.toml", "README.md", "app")


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
        else:
            shutil.copy(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("wheels")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "wheel", "-q", "--no-deps", "--wheel-dir", str(out), str(src)], cwd=src)
    [built] = out.glob("cs_agent-*.whl")
    return built


def fresh_venv(where: Path) -> Path:
    """A virtual environment without pip (this interpreter's pip installs into it)."""
    run([sys.executable, "-m", "venv", "--without-pip", str(where)], cwd=where.parent)
    return where / "bin" / "python"


def pip_install(python: Path, *args: str) -> None:
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
    run([*pip, "install", "-q", *args], cwd=python.parent)


def clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH, no VIRTUAL_ENV: only what a container would have."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {**keep, "PYTHONDONTWRITEBYTECODE": "1", **extra}


@pytest.fixture
def fresh_database() -> Iterator[str]:
    url, admin = create_fresh_database("csagent_wheel")
    yield url
    drop_database(admin, url)


def check_installed(python: Path, database_url: str, workdir: Path) -> None:
    """Imported from the venv, migrates a fresh database, serves the page and the help."""
    where = run([str(python), "-c", "import app; print(app.__file__)"], workdir, clean_env())
    assert Path(where.strip()).is_relative_to(python.parent.parent), where

    out = run([str(python), "-m", "app", "migrate"], workdir, clean_env(DATABASE_URL=database_url))
    assert "migrations applied" in out
    assert current_revision(database_url) == head_revision()

    port = procs.free_port()
    env = clean_env(
        DATABASE_URL=database_url,
        JWT_SECRET="wheel-test-secret-wheel-test-secret-0123456789",
        LLM_PROVIDER="demo",
    )
    log = (workdir / "serve.log").open("wb")
    server = subprocess.Popen(
        [str(python.parent / "cs-agent"), "serve", "--no-seed", "--port", str(port)],
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (workdir / "serve.log").read_text()
            try:
                ready = httpx.get(base + "/readyz", timeout=2)
                if ready.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (workdir / "serve.log").read_text()
            time.sleep(0.2)
        assert ready.json()["migrations"] == "head"
        page = httpx.get(base + "/", timeout=5)
        assert page.status_code == 200 and "<html" in page.text.lower()
        assert httpx.get(base + "/help/returns", timeout=5).status_code == 200
    finally:
        os.kill(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(server.pid, signal.SIGKILL)
            server.wait(timeout=5)
        log.close()


def test_the_wheel_migrates_and_serves_without_the_source_tree(
    wheel: Path, fresh_database: str, tmp_path: Path
) -> None:
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, "--no-deps", str(wheel))
    purelib = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    # The dependencies of this .venv, after the venv's own site-packages (a .pth line adds
    # a folder; it does not read the .pth files in it, so the editable app stays out).
    (purelib / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    check_installed(python, fresh_database, workdir)


@pytest.mark.slow
def test_the_wheel_installs_with_its_pinned_dependencies(
    wheel: Path, fresh_database: str, tmp_path: Path
) -> None:
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, "-c", str(ROOT / "constraints.txt"), str(wheel))
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    check_installed(python, fresh_database, workdir)
