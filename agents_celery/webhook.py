"""Webhooks of runs, without I/O: what is sent when a run completes, fails, is cancelled or pauses, and how it
is signed. The worker's ``agents_celery.webhook`` task delivers it (:mod:`agents_celery.broker.webhooks`).

A delivery is a POST of the summary as JSON with these headers:

- ``Idempotency-Key``: the same for every attempt at one event of one run (``<run_id>:<step>:<status>``), so a
  receiver drops duplicates (delivery is at least once);
- ``X-Agents-Celery-Timestamp``: Unix seconds of this attempt;
- ``X-Agents-Celery-Signature``: ``sha256=`` and the hex HMAC-SHA256, keyed with
  ``AGENTS_CELERY_WEBHOOK_SECRET``, of ``<timestamp>.<body>`` (check it, and the timestamp's age, before
  trusting the body: :func:`verify`).

Where a webhook may go: nothing a caller sends makes the worker reach an address the operator did not allow. An
address that is not globally routable (loopback, private 10/8 172.16/12 192.168/16, shared 100.64/10, link-local
with the cloud metadata service 169.254.169.254, ``0.0.0.0``, multicast, reserved; IPv6 ``::1``, ``fc00::/7``,
``fe80::/10``, and IPv4 addresses embedded in IPv6: mapped ``::ffff:a.b.c.d``, 6to4, NAT64) is refused unless
``AGENTS_CELERY_WEBHOOK_ALLOW`` lists it: comma-separated host names (``hooks.internal``: that name, any
address), ``host:port``, IP addresses or CIDR networks (``10.1.0.0/16``, ``[fd00::1]:8443``). :func:`check_url`
refuses literal addresses when a run is started; the worker resolves names at delivery time, checks every
address and connects to the address it checked (:mod:`agents_celery.broker.webhooks`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .errors import ValidationError
from .runs import RunState

SIGNATURE = "X-Agents-Celery-Signature"
TIMESTAMP = "X-Agents-Celery-Timestamp"
#: Statuses a webhook is sent for.
NOTIFIED = ("completed", "failed", "cancelled", "paused")


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class WebhookAllow:
    """The operator's own receivers (``AGENTS_CELERY_WEBHOOK_ALLOW``), which may be inside the network.

    ``hosts``: (lower-case host name or literal, port or None for any); ``networks``: (network, port or None).
    """

    hosts: frozenset[tuple[str, int | None]] = frozenset()
    networks: tuple[tuple[IPNetwork, int | None], ...] = ()

    @classmethod
    def parse(cls, value: str) -> WebhookAllow:
        """Parse ``"hooks.internal, 10.0.0.0/8, 127.0.0.1:8080, [::1]:9000"``; ValueError names a bad entry."""
        hosts: set[tuple[str, int | None]] = set()
        networks: list[tuple[IPNetwork, int | None]] = []
        for entry in filter(None, (e.strip() for e in value.split(","))):
            host, port = _split_entry(entry)
            try:
                networks.append((ipaddress.ip_network(host, strict=False), port))
            except ValueError:
                if not host or "/" in host or any(c.isspace() for c in host):
                    raise ValueError(f"bad entry {entry!r}: expected a host, host:port, IP or CIDR network") from None
                hosts.add((host.lower().rstrip("."), port))
        return cls(frozenset(hosts), tuple(networks))

    def names(self, host: str, port: int) -> bool:
        """Whether the URL's host name itself is allowed (whatever it resolves to)."""
        host = host.lower().rstrip(".")
        return (host, None) in self.hosts or (host, port) in self.hosts

    def contains(self, address: IPAddress, port: int) -> bool:
        """Whether ``address`` (in an allowed network) may be reached on ``port``."""
        return any(
            address.version == net.version and address in net and allowed in (None, port)  # `in` ignores versions
            for net, allowed in self.networks
        )


def _split_entry(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]``, ``[v6]:port``, a bare IPv6 address or a CIDR (no port)."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError(f"bad entry {entry!r}")
        return host, _port(entry, rest[1:]) if rest else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, _port(entry, port)
    return entry, None


def _port(entry: str, text: str) -> int:
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"bad port in entry {entry!r}")
    return int(text)


def refused_address(address: IPAddress) -> str | None:
    """Why ``address`` is not a public receiver, as a noun phrase (None when it is globally routable unicast)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        reason = refused_address(address.ipv4_mapped)
        return f"an IPv6 form of {address.ipv4_mapped} ({reason})" if reason else None
    for kind in ("loopback", "link_local", "multicast", "unspecified", "reserved", "private"):
        if getattr(address, f"is_{kind}"):
            return f"{'an' if kind == 'unspecified' else 'a'} {kind.replace('_', '-')} address"
    if not address.is_global:
        return "not a globally routable address"
    if isinstance(address, ipaddress.IPv6Address) and address.sixtofour is not None:
        reason = refused_address(address.sixtofour)
        return f"a 6to4 form of {address.sixtofour} ({reason})" if reason else None
    return None


def address_problem(address: IPAddress, port: int, allow: WebhookAllow) -> str | None:
    """Why a webhook may not be sent to ``address``:``port`` (None: it may)."""
    if allow.contains(address, port):
        return None
    reason = refused_address(address)
    return f"{address} is {reason} (allow it with AGENTS_CELERY_WEBHOOK_ALLOW)" if reason else None


def literal_address(host: str) -> IPAddress | None:
    """The address a URL's host spells without DNS: ``10.0.0.1``, ``::1``, and the short or numeric IPv4 forms
    the resolver also accepts (``127.1``, ``2130706433``, ``0x7f.1``)."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host.lower()) and host[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def loopback_name(host: str) -> IPAddress | None:
    """127.0.0.1 for ``localhost`` and ``*.localhost`` (RFC 6761: loopback, whatever a resolver says)."""
    name = host.lower().rstrip(".")
    return ipaddress.IPv4Address("127.0.0.1") if name == "localhost" or name.endswith(".localhost") else None


def default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def check_url(url: str, allow: WebhookAllow | str = "") -> str:
    """``url`` if it is an absolute http(s) URL whose host is not a refused literal address (ValidationError
    otherwise). Host names are checked again, resolved, when the webhook is delivered."""
    parsed = urlsplit(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc or len(url) > 2000:
        raise ValidationError(f"webhook_url must be an http:// or https:// URL, got {url!r}")
    try:
        host, port = parsed.hostname, parsed.port or default_port(parsed.scheme)
    except ValueError:
        host, port = None, 0
    if not host:
        raise ValidationError(
            f"webhook_url must be an http:// or https:// URL with a host and a valid port, got {url!r}"
        )
    rules = WebhookAllow.parse(allow) if isinstance(allow, str) else allow
    if rules.names(host, port):
        return url
    address = literal_address(host) or loopback_name(host)
    problem = address_problem(address, port, rules) if address is not None else None
    if problem:
        raise ValidationError(f"webhook_url {url!r} is refused: {problem}")
    return url


def event_key(run_id: str, step: int, status: str) -> str:
    """The idempotency key of one event of one run (stable across attempts and re-sends)."""
    return f"{run_id}:{step}:{status}"


def summary(state: RunState) -> dict[str, Any]:
    """What a webhook says about the run."""
    return {
        "run_id": state.run_id,
        "agent_id": state.agent_id,
        "session_id": state.session_id,
        "user_id": state.user_id,
        "status": state.status.value,
        "output": state.output,
        "error": state.error.model_dump() if state.error else None,
        "pending": [
            {"tool_call_id": c.id, "tool_name": c.name, "tool_args": c.args, "reason": c.pause_reason}
            for c in state.pending
        ],
        "schedule_id": state.schedule_id,
    }


def sign(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify(secret: str, headers: Any, body: bytes, tolerance_seconds: float = 300.0) -> bool:
    """Whether a received webhook is ours and fresh (``headers``: any mapping with ``get``)."""
    timestamp = headers.get(TIMESTAMP) or ""
    given = headers.get(SIGNATURE) or ""
    try:
        age = abs(time.time() - float(timestamp))
    except ValueError:
        return False
    return age <= tolerance_seconds and hmac.compare_digest(given, sign(secret, timestamp, body))
