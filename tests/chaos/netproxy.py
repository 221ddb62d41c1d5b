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
  `blackhole(strand=True)`: the connections open meanwhile stay silent for good, healed or
  not (a NAT or load balancer that dropped their state); only new ones work again.
- `lost_reply(match=b"COMMIT", after=None)`: once the client sent bytes containing `match`
  (any bytes when None; with `after`, only once it sent `after` earlier on the connection,
  e.g. the write's own statement), the server's reply is read off the server and thrown
  away, and the connection is stranded: the server did the work, the client never hears,
  nor anything after.
- `partition()`: new connections are refused (the listener closes) and open ones are black
  holes (`strand=True`: for good); `heal` listens again on the same port.

A stranded connection forwards nothing until its client closes it; then the server's side
is reset too (a server would find out by its own keepalives, later). The proxy's kernel
acknowledges every byte, so the client's kernel never finds such a connection dead by
itself, as its TCP keepalives or TCP_USER_TIMEOUT would through a real NAT; a path made
with `give_up_s` plays that part: each stranded connection is reset that long after it
went silent.

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
    lost_after: bytes | None = None
    partition: bool = False
    strand: bool = False  # connections open or accepted under the fault stay silent


@dataclass(eq=False)  # hashed by identity: kept in a set
class _Conn:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    budget: int | None = None  # bytes left before the reset
    primed: bool = False  # lost_reply: the client sent `after`
    armed: bool = False  # lost_reply: the client sent the matching request (once primed)
    stranded: bool = False  # silent for good (a reply lost, or its state dropped)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class Path:
    """One listener forwarding to one upstream. Its fault methods may be called from any
    thread; each returns once the fault is in force."""

    def __init__(
        self,
        proxy: NetProxy,
        name: str,
        upstream: tuple[str, int],
        seed: int,
        give_up_s: float | None = None,
    ) -> None:
        self.proxy = proxy
        self.name = name
        self.upstream = upstream
        self.give_up_s = give_up_s
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

    def blackhole(self, *, strand: bool = False) -> None:
        def apply() -> None:
            self._faults.blackhole = True
            self._strand(strand)
            self._flowing.clear()

        self.proxy.call(apply)

    def lost_reply(self, match: bytes | None = b"COMMIT", after: bytes | None = None) -> None:
        def apply() -> None:
            self._faults.lost_reply, self._faults.lost_match = True, match
            self._faults.lost_after = after
            for conn in self._conns:
                conn.primed = conn.armed = False

        self.proxy.call(apply)

    def partition(self, *, strand: bool = False) -> None:
        async def apply() -> None:
            self._faults.partition = True
            self._strand(strand)
            self._flowing.clear()
            if self._server is not None:
                self._server.close()
                self._server = None

        self.proxy.run(apply())

    def heal(self) -> None:
        """Every fault off (stranded connections stay silent)."""

        async def apply() -> None:
            was_partitioned = self._faults.partition
            self._faults = _Faults()
            for conn in self._conns:
                conn.budget = None
            self._flowing.set()
            if was_partitioned:
                await self._listen()

        self.proxy.run(apply())

    def open_connections(self) -> int:
        return len(self._conns)

    def _strand(self, strand: bool) -> None:
        self._faults.strand = strand
        if strand:
            for conn in self._conns:
                self._stranded(conn)

    def _stranded(self, conn: _Conn) -> None:
        if conn.stranded:
            return
        conn.stranded = True
        if self.give_up_s is not None:
            asyncio.get_running_loop().call_later(self.give_up_s, self._reset, conn)

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
        conn = _Conn(c_writer, s_writer, self._faults.reset_after)
        self._conns.add(conn)
        if self._faults.strand:
            self._stranded(conn)
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
            if not conn.stranded:  # a stranded one is read on, to drop and to see its end
                await self._flowing.wait()
            try:
                data = await reader.read(CHUNK)
            except OSError:
                data = EOF
            f = self._faults
            if conn.stranded:
                if not data:  # its client gave up (or the server): the other side too
                    self._reset(conn)
                    return
                continue
            if data and upstream and f.lost_reply and not conn.armed:
                if not conn.primed:
                    conn.primed = f.lost_after is None or f.lost_after in data
                if conn.primed:
                    conn.armed = f.lost_match is None or f.lost_match in data
            if data and not upstream and conn.armed and f.lost_reply:
                # the server answered; the client never hears, nor anything after
                self.stats.lost_replies += 1
                self._stranded(conn)
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
            while not self._flowing.is_set() or conn.stranded:
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
        if conn.stranded:
            await asyncio.Event().wait()  # until the connection is reset (cancelling this)
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

    def path(self, name: str, upstream: tuple[str, int], give_up_s: float | None = None) -> Path:
        """A new listener on a free port forwarding to `upstream`."""

        async def make() -> Path:
            path = Path(self, name, upstream, self._random.randrange(2**32), give_up_s)
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
