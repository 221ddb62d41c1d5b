"""WEBHOOK_ALLOWED_HOSTS: which client-supplied webhook URLs may be sent to, and the
checked address a send goes to (app/notify/destinations.py). Literal addresses and
`localhost` only: no network."""

from __future__ import annotations

import pytest

from app.notify.destinations import HostPolicy, RefusedDestination, resolve

ANY_PUBLIC = HostPolicy.parse("")


class TestPolicy:
    def test_empty_allows_any_public_host_and_lists_none(self) -> None:
        assert ANY_PUBLIC.any_public and ANY_PUBLIC.hosts == frozenset()

    def test_listed_hosts_are_canonical_and_star_adds_public_ones(self) -> None:
        policy = HostPolicy.parse(" Hooks.Example.COM. , 10.0.0.7,[::FFFF:10.0.0.8], *")
        assert policy.any_public
        assert policy.hosts == {"hooks.example.com", "10.0.0.7", "10.0.0.8"}
        assert not HostPolicy.parse("hooks.example.com").any_public


class TestRefused:
    @pytest.mark.parametrize(
        "url",
        [
            "http://127.0.0.1/x",
            "http://10.1.2.3/x",
            "http://192.168.0.10:8080/x",
            "http://172.16.0.1/x",
            "http://169.254.169.254/latest/meta-data",
            "http://100.64.0.1/x",  # shared address space
            "http://0.0.0.0/x",
            "http://[::1]/x",
            "http://[fe80::1]/x",
            "http://[fc00::1]/x",
            "http://[::ffff:127.0.0.1]/x",  # IPv4-mapped loopback
            "http://224.0.0.1/x",  # multicast
            "http://localhost:9000/x",  # a name that resolves inside
        ],
    )
    async def test_an_address_inside_is_refused_unless_listed(self, url: str) -> None:
        with pytest.raises(RefusedDestination, match="private, loopback or link-local") as e:
            await resolve(url, HostPolicy.parse("*"))
        assert e.value.lasting

    @pytest.mark.parametrize(
        "url",
        ["ftp://8.8.8.8/x", "file:///etc/passwd", "http:///x", "//8.8.8.8/x", "http://8.8.8.8:0/"],
    )
    async def test_not_an_http_url_with_a_host(self, url: str) -> None:
        with pytest.raises(RefusedDestination):
            await resolve(url, ANY_PUBLIC)

    async def test_with_hosts_listed_another_public_host_is_refused(self) -> None:
        with pytest.raises(RefusedDestination, match="not an allowed host"):
            await resolve("https://8.8.8.8/x", HostPolicy.parse("hooks.example.com"))

    async def test_a_name_that_does_not_resolve_is_refused_for_now_only(self) -> None:
        with pytest.raises(RefusedDestination, match="could not be resolved") as refused:
            await resolve("https://no-such-host.invalid/x", ANY_PUBLIC)
        assert not refused.value.lasting  # a send tries again later

    async def test_a_long_url_is_refused(self) -> None:
        with pytest.raises(RefusedDestination, match="longer than"):
            await resolve("https://8.8.8.8/" + "x" * 3000, ANY_PUBLIC)


class TestAllowed:
    async def test_a_public_address_is_sent_to_as_checked(self) -> None:
        target = await resolve("https://8.8.8.8:8443/hooks?a=1#frag", ANY_PUBLIC)
        assert target.url == "https://8.8.8.8:8443/hooks?a=1"
        assert target.host == "8.8.8.8" and target.host_header == "8.8.8.8:8443"

    async def test_a_listed_private_host_is_allowed_and_pinned_to_its_address(self) -> None:
        target = await resolve("http://user:pw@localhost:9000/h", HostPolicy.parse("localhost"))
        assert target.url in ("http://user:pw@127.0.0.1:9000/h", "http://user:pw@[::1]:9000/h")
        assert target.host == "localhost" and target.host_header == "localhost:9000"

    async def test_a_listed_ip_is_allowed_among_public_hosts(self) -> None:
        target = await resolve("http://[::1]/h", HostPolicy.parse("*,::1"))
        assert target.url == "http://[::1]/h" and target.host_header == "[::1]"
