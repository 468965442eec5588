"""Posting an alert to a project's webhook without letting the dashboard reach what it must not.

A project's owner types the webhook URL, and the dashboard, not the owner, sends the request: left
alone, that URL could name this machine (127.0.0.1, localhost, [::1]), the lab's private network
(10/8, 192.168/16) or a cloud metadata service (169.254.169.254), and the answer (or the error
text) would come back to the owner on the run page and in the API. So:

- the host is resolved here, every address it resolves to is checked, and the request connects to
  the address that was checked (the URL's host stays in the Host header and in TLS's SNI and
  certificate check), so a name that resolves anew between check and connect (DNS rebinding)
  cannot switch to another address;
- loopback, private, link-local, shared (100.64/10), multicast, reserved and unspecified
  addresses are refused unless `OPL_WEBHOOK_ALLOW` names them (a host name, an address or a
  network, comma-separated);
- redirects are not followed;
- what is stored and shown is a short reason and at most the status class (`HTTP 5xx`), never
  the answer's body or the network error's text.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from django.conf import settings

TIMEOUT_S = 5.0
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class WebhookError(Exception):
    """A webhook post that did not go through, with a reason safe to show to the project's owner.
    `permanent`: retrying will not help (a refused address, a 4xx, a redirect)."""

    def __init__(self, reason: str, *, permanent: bool = False):  # a default: Celery re-creates it from args
        super().__init__(reason)
        self.reason = reason
        self.permanent = permanent


@dataclass(frozen=True)
class Allow:
    """What OPL_WEBHOOK_ALLOW lets through besides public addresses."""

    hosts: frozenset[str]
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]

    @classmethod
    def parse(cls, entries: list[str]) -> Allow:
        hosts, networks = set(), []
        for entry in entries:
            entry = entry.strip().strip("[]").lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def admits(self, host: str, address: Address) -> bool:
        return host in self.hosts or any(address in net for net in self.networks if net.version == address.version)


def allow_list() -> Allow:
    return Allow.parse(list(getattr(settings, "OPL_WEBHOOK_ALLOW", [])))


def _plain(address: Address) -> Address:
    """An IPv4 address written as IPv6 (::ffff:127.0.0.1) is judged as the IPv4 address it is."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_public(address: Address) -> bool:
    address = _plain(address)
    return address.is_global and not address.is_multicast


def literal_problem(url: str) -> str | None:
    """Why a URL may not be a webhook without resolving anything (checked when it is set): a
    literal address or `localhost` that is not public and not allowed. Names that resolve to
    such addresses are refused when an alert is sent (their addresses may change)."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    allow = allow_list()
    if host == "localhost" or host.endswith(".localhost"):
        return None if host in allow.hosts else f"{host} is this machine; set OPL_WEBHOOK_ALLOW to allow it"
    try:
        address = _plain(ipaddress.ip_address(host))
    except ValueError:
        return None
    if is_public(address) or allow.admits(host, address):
        return None
    return f"{address} is not a public address; set OPL_WEBHOOK_ALLOW to allow it"


def resolve_checked(host: str, port: int) -> Address:
    """The address to connect to: the first that `host` resolves to, once every one of them
    passed the check (a name with one private address among public ones is refused: which one
    a client would use is not ours to know)."""
    host = host.rstrip(".").lower()
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise WebhookError(f"{host} does not resolve", permanent=False) from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos))
    if not addresses:
        raise WebhookError(f"{host} does not resolve", permanent=False)
    allow = allow_list()
    for address in addresses:
        if not (is_public(address) or allow.admits(host, _plain(address))):
            raise WebhookError(
                f"{host} resolves to a non-public address ({_plain(address)}); OPL_WEBHOOK_ALLOW does not name it",
                permanent=True,
            )
    return addresses[0]


def post_json(url: str, body: dict, *, timeout_s: float = TIMEOUT_S) -> None:
    """POST `body` as JSON to the webhook; WebhookError with a short reason when it fails."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookError("not an http(s) URL", permanent=True)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise WebhookError("the URL's port is not a number from 0 to 65535", permanent=True) from None
    host = parts.hostname
    address = resolve_checked(host, port)
    netloc = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
    target = parts._replace(netloc=netloc).geturl()
    host_header = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        host_header += f":{parts.port}"
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as client:
            response = client.post(
                target,
                json=body,
                headers={"Host": host_header},
                extensions={"sni_hostname": host} if parts.scheme == "https" else {},
            )
    except httpx.HTTPError:  # one reason for refused, reset and timed out: no port oracle
        raise WebhookError("no answer (connection failed or timed out)", permanent=False) from None
    status = response.status_code
    if 300 <= status < 400:
        raise WebhookError(f"HTTP {status // 100}xx: redirects are not followed", permanent=True)
    if status == 429 or status >= 500:
        raise WebhookError(f"HTTP {status // 100}xx", permanent=False)
    if status >= 400:
        raise WebhookError(f"HTTP {status // 100}xx", permanent=True)
