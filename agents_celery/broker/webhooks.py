"""Delivers webhooks: the ``agents_celery.webhook(url, key, summary)`` task, registered by ``configure(app)``.

A webhook is sent (by the engine, the sweeper or the Runtime, :meth:`StepPublisher.notify`) when a run with a
``webhook_url`` completes, fails, is cancelled or pauses; the summary is built then, so every attempt sends
the same body. A 2xx answer delivers it; anything else (an error status, a refused connection, a timeout) is
retried ``webhook_retries`` times, ``webhook_backoff_seconds`` * 2^n apart (at most 10 minutes), then given up
with an error in the worker's log. The task is acked late and re-delivered if its worker dies, so delivery is
at least once: receivers drop duplicates by ``Idempotency-Key`` (:mod:`agents_celery.webhook`).

Where it may go is checked at each attempt (:func:`resolve`): the host name is resolved, every address it
resolves to must be public or allowed by ``AGENTS_CELERY_WEBHOOK_ALLOW``, and the connection goes to an address
that was checked (the original ``Host`` header and TLS server name are kept), so a name re-pointed between the
check and the connect (DNS rebinding) cannot reach inside the network. Redirects are not followed (a 3xx is a
failed attempt). A refused destination is logged as a warning and given up at once: retrying would not change
the answer. Standard library only (``http.client``): the worker needs nothing beyond the core install.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import unquote, urlsplit

from ..settings import Settings
from ..webhook import (
    SIGNATURE,
    TIMESTAMP,
    IPAddress,
    WebhookAllow,
    address_problem,
    default_port,
    literal_address,
    loopback_name,
    sign,
)

log = logging.getLogger(__name__)

#: Longest wait between two attempts.
MAX_BACKOFF_SECONDS = 600.0


class WebhookRefused(Exception):
    """The receiver did not take the webhook (this attempt)."""


class DestinationRefused(WebhookRefused):
    """The URL points where webhooks may not go (a loopback, private or reserved address the operator did not
    allow): no attempt is made, now or later."""


def resolve(host: str, port: int, allow: WebhookAllow) -> list[IPAddress]:
    """The addresses of ``host`` a webhook may be sent to; DestinationRefused when any of them is refused (a
    name with one internal address is treated as internal), WebhookRefused (tried again later) when the name does
    not resolve."""
    literal = literal_address(host) or loopback_name(host)
    if literal is not None:
        found = [literal]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError) as exc:
            raise WebhookRefused(f"cannot resolve {host!r}: {exc}") from exc
        found = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos))
    if allow.names(host, port):
        return found
    problems = [p for p in (address_problem(a, port, allow) for a in found) if p]
    if problems:
        raise DestinationRefused(f"{host!r} is refused: " + "; ".join(problems))
    return found


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to an address checked beforehand; ``host`` stays the URL's (the Host header)."""

    def __init__(self, host: str, port: int, address: IPAddress, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address
        self.aborted = False

    def _open(self) -> socket.socket:
        sock = socket.create_connection((str(self.address), self.port), self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def connect(self) -> None:
        self.sock = self._open()

    def abort(self) -> None:
        """Past the attempt's deadline (from a timer thread): a receiver trickling bytes would otherwise keep the
        worker's thread, since each read has its own timeout. The read in progress fails at once."""
        self.aborted = True
        sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the TCP socket itself, under TLS too


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    """The same over TLS: the certificate is verified for the URL's host name (SNI too), not the address."""

    default_port = http.client.HTTPS_PORT

    def __init__(self, host: str, port: int, address: IPAddress, timeout: float) -> None:
        super().__init__(host, port, address, timeout)
        self.tls = ssl.create_default_context()

    def connect(self) -> None:
        self.sock = self.tls.wrap_socket(self._open(), server_hostname=self.host)


def post(url: str, data: bytes, headers: dict[str, str], timeout: float, allow: WebhookAllow) -> int:
    """POST ``data`` to ``url`` through a checked address; the status (redirects are not followed). ``timeout``
    bounds the whole attempt: connecting, TLS, sending and the answer's headers."""
    parsed = urlsplit(url)
    try:
        host, port = parsed.hostname or "", parsed.port or default_port(parsed.scheme)
    except ValueError as exc:
        raise DestinationRefused(f"bad URL {url!r}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not host:
        raise DestinationRefused(f"not an http:// or https:// URL: {url!r}")
    if parsed.username is not None:  # credentials in the URL, as httpx sent them: Basic auth
        userinfo = f"{unquote(parsed.username)}:{unquote(parsed.password or '')}"
        headers = {**headers, "Authorization": "Basic " + base64.b64encode(userinfo.encode()).decode()}
    target = (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")
    kind = _PinnedHTTPSConnection if parsed.scheme == "https" else _PinnedHTTPConnection
    errors = []
    deadline = time.monotonic() + timeout  # for the whole attempt, not for each read
    for address in resolve(host, port, allow):  # the first address that answers (a name may have several)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            errors.append(f"{address}: not tried, the attempt took {timeout}s")
            break
        conn = kind(host, port, address, remaining)
        timer = threading.Timer(remaining, conn.abort)
        timer.daemon = True
        timer.start()
        try:
            conn.request("POST", target, body=data, headers=headers)
            status = conn.getresponse().status
            if not conn.aborted:  # a cut-off answer may parse as a whole one
                return status
            errors.append(f"{address}: no whole answer within {timeout}s (the attempt's deadline passed)")
        except (OSError, ValueError, http.client.HTTPException) as exc:
            late = " (the attempt's deadline passed)" if conn.aborted else ""
            errors.append(f"{address}: {type(exc).__name__}: {exc}{late}")
        finally:
            timer.cancel()
            conn.close()
    raise WebhookRefused("; ".join(errors) or f"no address for {host!r}")


def deliver(settings: Settings, url: str, key: str, body: dict[str, Any]) -> None:
    """One attempt; WebhookRefused unless the receiver answered 2xx (DestinationRefused: may not be sent)."""
    if not settings.webhook_secret:
        raise WebhookRefused("AGENTS_CELERY_WEBHOOK_SECRET is not set on this worker: webhooks are not signed")
    data = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "agents-celery-webhook",
        "Idempotency-Key": key,
        TIMESTAMP: timestamp,
        SIGNATURE: sign(settings.webhook_secret, timestamp, data),
    }
    allow = WebhookAllow.parse(settings.webhook_allow)
    status = post(url, data, headers, settings.webhook_timeout_seconds, allow)
    if 300 <= status < 400:
        raise WebhookRefused(f"the receiver answered {status} (redirects are not followed)")
    if not 200 <= status < 300:
        raise WebhookRefused(f"the receiver answered {status}")


def backoff(settings: Settings, retries: int) -> float:
    """Seconds before attempt ``retries + 2``."""
    return float(min(settings.webhook_backoff_seconds * 2**retries, MAX_BACKOFF_SECONDS))


def register(app: Any, settings: Settings) -> None:
    """The webhook task of ``app``, with its own options (like the step task: nothing of the host's changes)."""
    from .publisher import OWN_TASK_OPTIONS, WEBHOOK_TASK

    @app.task(  # type: ignore[untyped-decorator]
        name=WEBHOOK_TASK, queue=settings.queue, max_retries=settings.webhook_retries, **OWN_TASK_OPTIONS
    )
    def webhook(self: Any, url: str, key: str, body: dict[str, Any]) -> str:
        """Deliver one run's webhook (retried with backoff until the receiver takes it)."""
        try:
            deliver(settings, url, key, body)
        except DestinationRefused as exc:
            log.warning("webhook %s to %s refused, not sent: %s", key, url, exc)
            return "refused"
        except WebhookRefused as exc:
            if self.request.retries >= settings.webhook_retries:
                log.error("webhook %s to %s given up after %d attempts: %s", key, url, self.request.retries + 1, exc)
                return "given up"
            log.warning("webhook %s to %s: %s; trying again", key, url, exc)
            raise self.retry(exc=exc, countdown=backoff(settings, self.request.retries)) from None
        return "delivered"
