"""A TCP fault proxy: what a network does between healthy processes, switchable at run time.

`tc netem` is not usable on these machines and toxiproxy is not packaged, so this stands on
each path of a test deployment (a replica to PgBouncer, a replica to the model, the webhook
worker to its receiver): one listener per path, forwarding to the real server.

    with NetProxy() as proxy:                       # its own thread and event loop
        pg = proxy.path("replica-1 pg", ("127.0.0.1", 6432))
        url = f"postgresql://...@127.0.0.1:{pg.port}/db"
        pg.latency(up=(0.2, 0.05))                  # 200 ms + up to 50 ms jitter, client->server
        pg.blackhole()                              # accepted, nothing forwarded, kept open
        pg.heal()                                   # every fault off

Faults (each applies to open connections and to new ones, until `heal`):

- `latency(up=(fixed_s, jitter_s), down=...)`: each chunk is held back in its direction;
  chunks keep their order (a late chunk holds back the ones behind it).
- `bandwidth(bytes_per_s)`: both directions capped.
- `reset_after(n)`: each connection forwards n more bytes (both directions together), then
  both of its sockets are closed with a RST.
- `blackhole()`: nothing is forwarded either way and nothing is closed; bytes already read
  wait. A healed black hole delivers them (a network that came back before TCP gave up).
- `lost_reply(match=b"COMMIT")`: once the client sent bytes containing `match` (any bytes
  when None), the server's reply is read off the server and thrown away, and the connection
  goes silent: the server did the work, the client never hears. `heal` resets such a
  connection (its byte stream has a hole; nothing can continue on it).
- `partition()`: new connections are refused (the listener closes) and open ones are black
  holes; `heal` listens again on the same port.

Bytes are never altered, and never reordered: with no fault on, a path is a plain pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

CHUNK = 65536
QUEUED = 64  # chunks read ahead of the writer (backpressure past that)
EOF = b""


@dataclass
class PathStats:
    connections: int = 0
    refused: int = 0
    resets: int = 0
    lost_replies: int = 0
    bytes_up: int = 0
    bytes_down: int = 0


@dataclass
class _Faults:
    up: tuple[float, float] = (0.0, 0.0)  # latency (fixed, jitter) client -> server
    down: tuple[float, float] = (0.0, 0.0)  # server -> client
    bytes_per_s: float | None = None
    reset_after: int | None = None
    blackhole: bool = False
    lost_reply: bool = False
    lost_match: bytes | None = None
    partition: bool = False


@dataclass(eq=False)  # hashed by identity: kept in a set
class _Conn:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    budget: int | None = None  # bytes left before the reset
    armed: bool = False  # lost_reply: the client sent the matching request
    lost: bool = False  # lost_reply: a reply was thrown away; silent until healed
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class Path:
    """One listener forwarding to one upstream. Its fault methods may be called from any
    thread; each returns once the fault is in force."""

    def __init__(self, proxy: NetProxy, name: str, upstream: tuple[str, int], seed: int) -> None:
        self.proxy = proxy
        self.name = name
        self.upstream = upstream
        self.port = 0
        self.stats = PathStats()
        self._faults = _Faults()
        self._random = random.Random(seed)
        self._conns: set[_Conn] = set()
        self._server: asyncio.Server | None = None
        self._flowing = asyncio.Event()  # set while nothing stops the bytes
        self._flowing.set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # --- faults (any thread) --------------------------------------------------------------

    def latency(
        self, up: tuple[float, float] = (0.0, 0.0), down: tuple[float, float] = (0.0, 0.0)
    ) -> None:
        def apply() -> None:
            self._faults.up, self._faults.down = up, down

        self.proxy.call(apply)

    def bandwidth(self, bytes_per_s: float) -> None:
        def apply() -> None:
            self._faults.bytes_per_s = bytes_per_s

        self.proxy.call(apply)

    def reset_after(self, n: int) -> None:
        def apply() -> None:
            self._faults.reset_after = n
            for conn in self._conns:
                conn.budget = n

        self.proxy.call(apply)

    def blackhole(self) -> None:
        def apply() -> None:
            self._faults.blackhole = True
            self._flowing.clear()

        self.proxy.call(apply)

    def lost_reply(self, match: bytes | None = b"COMMIT") -> None:
        def apply() -> None:
            self._faults.lost_reply, self._faults.lost_match = True, match

        self.proxy.call(apply)

    def partition(self) -> None:
        async def apply() -> None:
            self._faults.partition = True
            self._flowing.clear()
            if self._server is not None:
                self._server.close()
                self._server = None

        self.proxy.run(apply())

    def heal(self) -> None:
        """Every fault off; connections that lost a reply are reset."""

        async def apply() -> None:
            was_partitioned = self._faults.partition
            self._faults = _Faults()
            for conn in list(self._conns):
                conn.budget = None
                if conn.lost:
                    self._reset(conn)
            self._flowing.set()
            if was_partitioned:
                await self._listen()

        self.proxy.run(apply())

    def open_connections(self) -> int:
        return len(self._conns)

    # --- forwarding (the proxy's loop) ----------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        if self._faults.partition:  # accepted in the moment the listener closed
            self.stats.refused += 1
            _abort(c_writer)
            return
        try:
            s_reader, s_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            self.stats.refused += 1
            _abort(c_writer)
            return
        self.stats.connections += 1
        conn = _Conn(c_writer, s_writer, budget=self._faults.reset_after)
        self._conns.add(conn)
        up = asyncio.Queue[tuple[float, bytes]](QUEUED)
        down = asyncio.Queue[tuple[float, bytes]](QUEUED)
        conn.tasks = [
            asyncio.create_task(self._read(conn, c_reader, up, upstream=True)),
            asyncio.create_task(self._write(conn, s_writer, up, upstream=True)),
            asyncio.create_task(self._read(conn, s_reader, down, upstream=False)),
            asyncio.create_task(self._write(conn, c_writer, down, upstream=False)),
        ]
        try:
            await asyncio.gather(*conn.tasks, return_exceptions=True)
        finally:
            self._conns.discard(conn)
            for writer in (c_writer, s_writer):
                writer.close()

    async def _read(
        self,
        conn: _Conn,
        reader: asyncio.StreamReader,
        queue: asyncio.Queue[tuple[float, bytes]],
        *,
        upstream: bool,
    ) -> None:
        last = 0.0
        while True:
            await self._flowing.wait()
            try:
                data = await reader.read(CHUNK)
            except OSError:
                data = EOF
            f = self._faults
            if data and upstream and f.lost_reply and not conn.armed:
                conn.armed = f.lost_match is None or f.lost_match in data
            if data and not upstream and (conn.lost or (conn.armed and f.lost_reply)):
                # the server answered; the client never hears, nor anything after
                if not conn.lost:
                    self.stats.lost_replies += 1
                conn.lost = True
                continue
            fixed, jitter = f.up if upstream else f.down
            delay = fixed + (self._random.uniform(0, jitter) if jitter else 0.0)
            last = max(last, time.monotonic() + delay)  # order kept under jitter
            await queue.put((last, data))
            if not data:
                return

    async def _write(
        self,
        conn: _Conn,
        writer: asyncio.StreamWriter,
        queue: asyncio.Queue[tuple[float, bytes]],
        *,
        upstream: bool,
    ) -> None:
        while True:
            at, data = await queue.get()
            wait = at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            while not self._flowing.is_set() or conn.lost:
                await self._until_flowing(conn)
            if not data:
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            if conn.budget is not None and len(data) >= conn.budget:
                data, cut = data[: conn.budget], True
            else:
                cut = False
                if conn.budget is not None:
                    conn.budget -= len(data)
            try:
                await self._send(writer, data, upstream)
            except OSError:  # the peer went away: so does the other side, at once
                self._reset(conn)
                return
            if cut:
                self.stats.resets += 1
                self._reset(conn)
                return

    async def _until_flowing(self, conn: _Conn) -> None:
        if conn.lost:
            await asyncio.Event().wait()  # until heal resets it (cancelling this task)
        await self._flowing.wait()

    async def _send(self, writer: asyncio.StreamWriter, data: bytes, upstream: bool) -> None:
        rate = self._faults.bytes_per_s
        step = len(data) if rate is None else max(1, int(rate / 20))
        for i in range(0, len(data), step):
            piece = data[i : i + step]
            writer.write(piece)
            await writer.drain()
            if upstream:
                self.stats.bytes_up += len(piece)
            else:
                self.stats.bytes_down += len(piece)
            if rate is not None:
                await asyncio.sleep(len(piece) / rate)

    def _reset(self, conn: _Conn) -> None:
        _abort(conn.client)
        _abort(conn.server)
        for task in conn.tasks:
            if task is not asyncio.current_task():
                task.cancel()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for conn in list(self._conns):
            self._reset(conn)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a RST (SO_LINGER 0), not a FIN: the peer reads ECONNRESET."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class NetProxy:
    """The proxy's event loop on a thread of its own, and its paths (`path(...)`)."""

    def __init__(self, seed: int = 0) -> None:
        self._random = random.Random(seed)
        self.paths: dict[str, Path] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=serve, name="netproxy", daemon=True)
        self._thread.start()
        ready.wait()

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        for path in self.paths.values():
            self.run(path._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop = None

    def path(self, name: str, upstream: tuple[str, int]) -> Path:
        """A new listener on a free port forwarding to `upstream`."""

        async def make() -> Path:
            path = Path(self, name, upstream, self._random.randrange(2**32))
            await path._listen()
            return path

        path: Path = self.run(make())
        self.paths[name] = path
        return path

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run `coro` on the proxy's loop and wait for its result (from another thread),
        or schedule it when called on the loop itself."""
        assert self._loop is not None, "the proxy is not started"
        if _running_loop() is self._loop:
            return self._loop.create_task(coro)
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def call(self, fn: Callable[[], None]) -> None:
        async def apply() -> None:
            fn()

        self.run(apply())

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
