"""Worker processes that share the load: each binds its own listening socket.

uvicorn's workers share one listening socket, and the kernel hands a new connection to
whichever worker is waiting in accept() first: long-lived connections (keep-alive clients,
a balancer's pooled connections) can pile onto one warm worker while the other idles
(uvicorn PR #2472). With SO_REUSEPORT (Linux), each worker listens on a socket of its own
on the same port, and the kernel spreads connections over them by their addresses.

The supervisor (restarts, signals, health checks) stays uvicorn's; only where a worker's
socket comes from changes. The parent binds the port without listening, so it holds the
address (a second service on the port fails at once) but receives no connection.
"""

from __future__ import annotations

import socket
from typing import Any

import uvicorn
from uvicorn.supervisors import multiprocess

from app.config import Settings


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for the service, one worker or several (and the tests' server).
    X-Forwarded-For is for the app to trust (TRUSTED_PROXIES: app/api/ratelimit.py), not
    uvicorn, which would believe it from 127.0.0.1; idle connections are kept longer than a
    proxy in front keeps its own (HTTP_KEEPALIVE_S)."""
    return {
        "log_level": settings.log_level.lower(),
        "proxy_headers": False,
        "timeout_keep_alive": settings.http_keepalive_s,
    }


def reuseport_supported() -> bool:
    return hasattr(socket, "SO_REUSEPORT")


def reuseport_socket(host: str, port: int, *, listen: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class OwnSocketProcess(multiprocess.Process):
    """A uvicorn worker that serves on a socket of its own (SO_REUSEPORT), not the one
    the supervisor bound."""

    def target(self, sockets: list[socket.socket] | None = None) -> None:  # pragma: no cover
        for shared in sockets or []:
            shared.close()
        own = reuseport_socket(self.config.host, self.config.port, listen=True)
        super().target([own])


def serve_workers(host: str, port: int, workers: int, options: dict[str, Any]) -> None:
    """`workers` processes of `app.main:create_app` on host:port."""
    if not reuseport_supported():
        uvicorn.run(
            "app.main:create_app", factory=True, host=host, port=port, workers=workers, **options
        )
        return
    config = uvicorn.Config(
        "app.main:create_app", factory=True, host=host, port=port, workers=workers, **options
    )
    holder = reuseport_socket(host, port, listen=False)
    multiprocess.Process = OwnSocketProcess  # type: ignore[misc]  # the supervisor's workers
    try:
        multiprocess.Multiprocess(config, sockets=[holder]).run()
    except KeyboardInterrupt:
        pass
    finally:
        holder.close()
