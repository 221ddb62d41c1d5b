"""Where a webhook URL a client supplied may point (WEBHOOK_ALLOWED_HOSTS).

A client names the URL, and the service POSTs to it from inside the network, so the URL
is checked twice: when the run is asked for (a typed 422) and again at every send, after
resolving its name, and the request then goes to the address that was checked (the name
is kept for the Host header and the TLS certificate). A name that resolves to a private
address later (DNS rebinding) is refused at the send, never connected to.

Policy: http or https only. With no hosts listed, any host whose every address is public.
With hosts listed (names or IPs), only those, plus any public host when `*` is listed. A
listed host may resolve to a private address (the operator named it); any other host may
not: private, loopback, link-local, shared, reserved and multicast addresses are refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit, urlunsplit

MAX_URL_LENGTH = 2048
RESOLVE_TIMEOUT_S = 5.0
_DEFAULT_PORTS = {"http": 80, "https": 443}

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class RefusedDestination(ValueError):
    """A URL the policy refuses; `reason` is safe to show to the client who sent it.
    `lasting`: the URL itself is refused (a send gives up); not lasting: its name did not
    resolve now (a send tries again later)."""

    def __init__(self, reason: str, *, lasting: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.lasting = lasting


@dataclass(frozen=True)
class HostPolicy:
    hosts: frozenset[str]  # listed names (lower case, no trailing dot) and IPs (canonical)
    any_public: bool

    @classmethod
    def parse(cls, text: str) -> HostPolicy:
        entries = {_canonical(e) for e in text.split(",") if e.strip()}
        if not entries:
            return cls(frozenset(), any_public=True)
        return cls(frozenset(entries - {"*"}), any_public="*" in entries)

    def listed(self, host: str) -> bool:
        return _canonical(host) in self.hosts


@dataclass(frozen=True)
class Destination:
    """Where to send: `url` names the checked address; `host` is for the Host header
    (`host_header`, with a port that is not the scheme's) and the TLS server name."""

    url: str
    host: str
    host_header: str


def _canonical(host: str) -> str:
    host = host.strip().strip("[]").rstrip(".").lower()
    try:
        return str(_unmapped(ipaddress.ip_address(host)))
    except ValueError:
        return host


def _unmapped(address: Address) -> Address:
    """::ffff:10.0.0.1 is 10.0.0.1."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_public(address: Address) -> bool:
    address = _unmapped(address)
    return address.is_global and not address.is_multicast


def checked_url(url: str, policy: HostPolicy) -> SplitResult:
    """What can be said of a URL without resolving it."""
    if len(url) > MAX_URL_LENGTH:
        raise RefusedDestination(f"the webhook URL is longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise RefusedDestination("the webhook is not a valid URL") from None
    if parts.scheme not in _DEFAULT_PORTS:
        raise RefusedDestination("the webhook URL must be http:// or https://")
    host = parts.hostname
    if not host:
        raise RefusedDestination("the webhook URL has no host")
    if port == 0:
        raise RefusedDestination("the webhook URL's port is not valid")
    if not policy.any_public and not policy.listed(host):
        raise RefusedDestination(f"webhooks may not go to {host}: it is not an allowed host")
    return parts


async def _addresses(host: str, port: int) -> list[Address]:
    try:
        return [_unmapped(ipaddress.ip_address(host))]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError):
        raise RefusedDestination(
            f"the webhook host {host} could not be resolved", lasting=False
        ) from None
    found: list[Address] = []
    for *_, sockaddr in infos:
        address = _unmapped(ipaddress.ip_address(str(sockaddr[0]).split("%")[0]))
        if address not in found:
            found.append(address)
    if not found:
        raise RefusedDestination(f"the webhook host {host} could not be resolved", lasting=False)
    return found


async def resolve(url: str, policy: HostPolicy) -> Destination:
    """The checked address to send `url` to, or RefusedDestination. Every address the name
    resolves to must be allowed, so no answer of a round-robin name reaches inside."""
    parts = checked_url(url, policy)
    host = parts.hostname or ""
    port = parts.port or _DEFAULT_PORTS[parts.scheme]
    addresses = await _addresses(host, port)
    if not policy.listed(host):
        private = [a for a in addresses if not is_public(a) and not policy.listed(str(a))]
        if private:
            raise RefusedDestination(
                f"webhooks may not go to {host}: it is a private, loopback or link-local "
                "address; an operator may allow it in WEBHOOK_ALLOWED_HOSTS"
            )
    address = addresses[0]
    literal = f"[{address}]" if address.version == 6 else str(address)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@" if userinfo else ""
    netloc += literal if parts.port is None else f"{literal}:{parts.port}"
    pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    display = f"[{host}]" if ":" in host else host
    header = display if parts.port is None else f"{display}:{parts.port}"
    return Destination(url=pinned, host=host, host_header=header)
