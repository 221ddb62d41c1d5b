"""The chaos soak's TCP fault proxy (tests/chaos/netproxy.py): each fault does what it says,
and with none on, a path is a plain pipe. Loopback sockets only; each test well under 2 s."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.chaos.netproxy import NetProxy, Path


class Upstream(socketserver.ThreadingTCPServer):
    """Echoes everything back, and keeps what each connection sent (what the server did)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.received: list[bytes] = []
        super().__init__(("127.0.0.1", 0), EchoHandler)


class EchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server = self.server
        assert isinstance(server, Upstream)
        while True:
            try:
                data = self.request.recv(65536)
            except OSError:
                return
            if not data:
                return
            server.received.append(data)
            self.request.sendall(data)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def path(upstream: Upstream) -> Iterator[Path]:
    with NetProxy(seed=3) as proxy:
        yield proxy.path("test", ("127.0.0.1", upstream.server_address[1]))


def connect(path: Path, timeout: float = 2.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", path.port), timeout=timeout)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return bytes(got)


def echo_all(sock: socket.socket, pieces: list[bytes]) -> bytes:
    """Sends the pieces while reading the echo (so neither side's buffers fill up)."""
    total = sum(len(p) for p in pieces)
    got: list[bytes] = []

    def read() -> None:
        got.append(recv_exactly(sock, total))

    reader = threading.Thread(target=read)
    reader.start()
    for piece in pieces:
        sock.sendall(piece)
    reader.join(timeout=10)
    return got[0] if got else b""


class TestNoFault:
    def test_bytes_come_back_unaltered_and_in_order(self, path: Path) -> None:
        pieces = [os.urandom(n) for n in (1, 7, 65536, 300_000, 3, 1024) * 3]
        with connect(path) as sock:
            assert echo_all(sock, pieces) == b"".join(pieces)
        for _ in range(100):  # counted once written, which may be after the client read it
            if path.stats.bytes_down == sum(map(len, pieces)):
                break
            time.sleep(0.01)
        assert path.stats.bytes_up == path.stats.bytes_down == sum(map(len, pieces))

    def test_many_connections_at_once_each_get_their_own_bytes(self, path: Path) -> None:
        socks = [connect(path) for _ in range(8)]
        try:
            for i, sock in enumerate(socks):
                sock.sendall(bytes([i]) * 1000)
            for i, sock in enumerate(socks):
                assert recv_exactly(sock, 1000) == bytes([i]) * 1000
        finally:
            for sock in socks:
                sock.close()


class TestLatency:
    def test_a_round_trip_takes_both_directions_delay(self, path: Path) -> None:
        path.latency(up=(0.15, 0.0), down=(0.1, 0.0))
        with connect(path) as sock:
            started = time.monotonic()
            sock.sendall(b"ping")
            assert recv_exactly(sock, 4) == b"ping"
            assert time.monotonic() - started >= 0.25

    def test_jitter_does_not_reorder_bytes(self, path: Path) -> None:
        path.latency(up=(0.0, 0.05), down=(0.0, 0.05))
        pieces = [bytes([i % 256]) * 10 for i in range(100)]
        with connect(path) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            got = bytearray()
            for piece in pieces:  # one piece at a time: each its own chunk in the proxy
                sock.sendall(piece)
                time.sleep(0.001)
            while len(got) < 1000:
                got += sock.recv(1000)
            assert bytes(got) == b"".join(pieces)

    def test_healed_path_has_no_delay(self, path: Path) -> None:
        path.latency(up=(0.5, 0.0))
        path.heal()
        with connect(path) as sock:
            started = time.monotonic()
            sock.sendall(b"x")
            assert recv_exactly(sock, 1) == b"x"
            assert time.monotonic() - started < 0.2


class TestBandwidth:
    def test_bytes_are_held_to_the_rate(self, path: Path) -> None:
        path.bandwidth(200_000)
        data = os.urandom(100_000)
        with connect(path, timeout=5) as sock:
            started = time.monotonic()
            assert echo_all(sock, [data]) == data
            took = time.monotonic() - started
        assert took >= 0.45  # 100 kB up then down at 200 kB/s (pipelined): at least 0.5 s


class TestReset:
    def test_reset_after_n_bytes_forwards_n_then_resets_both_sides(
        self, path: Path, upstream: Upstream
    ) -> None:
        path.reset_after(10)
        with connect(path) as sock:
            sock.sendall(b"a" * 100)
            with pytest.raises(ConnectionResetError):
                while sock.recv(100):
                    pass
        time.sleep(0.05)
        assert b"".join(upstream.received) == b"a" * 10
        assert path.stats.resets == 1


class TestBlackhole:
    def test_nothing_is_forwarded_and_the_socket_stays_open(
        self, path: Path, upstream: Upstream
    ) -> None:
        with connect(path, timeout=0.4) as sock:
            sock.sendall(b"hi")
            assert recv_exactly(sock, 2) == b"hi"
            path.blackhole()
            sock.sendall(b"hello")
            with pytest.raises(TimeoutError):
                sock.recv(10)  # no answer, and no EOF or reset either
            assert upstream.received == [b"hi"]
            fresh = connect(path, timeout=0.4)  # a new connection is accepted, and silent
            fresh.sendall(b"x")
            with pytest.raises(TimeoutError):
                fresh.recv(1)
            fresh.close()
            path.heal()  # the network came back: what was held is delivered
            assert recv_exactly(sock, 5) == b"hello"


class TestLostReply:
    def test_the_server_gets_the_request_the_client_never_hears(
        self, path: Path, upstream: Upstream
    ) -> None:
        path.lost_reply(match=b"COMMIT")
        with connect(path, timeout=0.4) as sock:
            sock.sendall(b"SELECT 1;")
            assert recv_exactly(sock, 9) == b"SELECT 1;"  # not the matching request
            sock.sendall(b"COMMIT;")
            with pytest.raises(TimeoutError):
                sock.recv(10)
            assert b"COMMIT;" in b"".join(upstream.received)  # the server did it
            assert path.stats.lost_replies == 1
            path.heal()  # the connection stays dead; a new one works
            sock.sendall(b"again")
            with pytest.raises(TimeoutError):
                sock.recv(10)
        assert b"again" not in b"".join(upstream.received)
        with connect(path) as fresh:
            fresh.sendall(b"COMMIT;")
            assert recv_exactly(fresh, 7) == b"COMMIT;"

    def test_with_after_only_a_match_that_follows_it_loses_its_reply(
        self, path: Path, upstream: Upstream
    ) -> None:
        path.lost_reply(match=b"COMMIT", after=b"INSERT")
        with connect(path, timeout=0.4) as sock:
            sock.sendall(b"COMMIT;")  # no INSERT before it: answered
            assert recv_exactly(sock, 7) == b"COMMIT;"
            sock.sendall(b"INSERT 1;")
            assert recv_exactly(sock, 9) == b"INSERT 1;"
            sock.sendall(b"COMMIT;")
            with pytest.raises(TimeoutError):
                sock.recv(10)
        assert b"".join(upstream.received).count(b"COMMIT;") == 2

    def test_a_stranded_connection_closed_by_its_client_is_reset_at_the_server(
        self, path: Path
    ) -> None:
        path.lost_reply(match=None)
        sock = connect(path, timeout=0.4)
        sock.sendall(b"x")
        with pytest.raises(TimeoutError):
            sock.recv(1)
        assert path.open_connections() == 1
        sock.close()
        for _ in range(100):
            if path.open_connections() == 0:
                break
            time.sleep(0.01)
        assert path.open_connections() == 0


class TestStrandedBlackhole:
    def test_connections_open_during_it_stay_silent_after_heal(self, path: Path) -> None:
        with connect(path, timeout=0.4) as old:
            old.sendall(b"hi")
            assert recv_exactly(old, 2) == b"hi"
            path.blackhole(strand=True)
            path.heal()
            old.sendall(b"lost")
            with pytest.raises(TimeoutError):
                old.recv(4)
            with connect(path) as fresh:
                fresh.sendall(b"ok")
                assert recv_exactly(fresh, 2) == b"ok"


class TestPartition:
    def test_new_connections_refused_open_ones_silent_until_healed(
        self, path: Path, upstream: Upstream
    ) -> None:
        with connect(path, timeout=0.4) as sock:
            sock.sendall(b"hi")
            assert recv_exactly(sock, 2) == b"hi"  # accepted before the partition
            path.partition()
            with pytest.raises(ConnectionRefusedError):
                connect(path)
            sock.sendall(b"ping")
            with pytest.raises(TimeoutError):
                sock.recv(4)
            assert path.open_connections() == 1
            path.heal()
            assert recv_exactly(sock, 4) == b"ping"
        with connect(path) as sock:  # listening again, on the same port
            sock.sendall(b"pong")
            assert recv_exactly(sock, 4) == b"pong"

    def test_with_give_up_a_stranded_connection_is_reset_as_its_kernel_would(
        self, upstream: Upstream
    ) -> None:
        with NetProxy() as proxy:
            path = proxy.path("keepalives", ("127.0.0.1", upstream.server_address[1]), 0.3)
            with connect(path, timeout=2) as sock:
                sock.sendall(b"hi")
                assert recv_exactly(sock, 2) == b"hi"
                path.blackhole(strand=True)
                started = time.monotonic()
                with pytest.raises(ConnectionResetError):
                    sock.recv(1)
                assert 0.25 < time.monotonic() - started < 1.5
