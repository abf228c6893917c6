"""Fault injection for tests: a TCP proxy in front of Redis (or a broker) that can reset every connection through it."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass


def _rst(sock: socket.socket) -> None:
    """Close ``sock`` with an RST (SO_LINGER 0), waking a thread blocked reading it first."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


@dataclass
class _Pair:
    client: socket.socket
    upstream: socket.socket
    #: Half-open: the proxy forgot this connection; the client learns it (RST) only when it next sends.
    forgotten: bool = False


class ResettingProxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream``; :meth:`reset` resets every open connection while the server
    behind stays up.

    ``reset()`` sends RST on both sides at once, as a failover or an idle timeout does. ``reset(half_open=True)``
    is a load balancer that dropped its state: the server's side is reset, but the client's socket is left as it
    is (no FIN, no RST, nothing to read) until the client sends on it, which then gets an RST. A client keeping
    idle connections finds out one connection at a time, on each one's next command.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._open: list[_Pair] = []
        self._forgotten: list[_Pair] = []  # half-open: their client sockets are closed by close() at the latest
        self._lock = threading.Lock()
        self.resets = 0
        #: Connections accepted so far.
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, scheme: str = "redis", path: str = "") -> str:
        """This proxy's address as a URL (``path``: ``/9`` for a Redis database ...)."""
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            pair = _Pair(client, upstream)
            with self._lock:
                self._open.append(pair)
                self.accepted += 1
            threading.Thread(target=self._pipe, args=(pair, client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(pair, upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if pair.forgotten:
                    break
                dst.sendall(data)
        if pair.forgotten:
            if src is pair.client:  # the client spoke on a connection the proxy forgot: it gets an RST
                _rst(pair.client)
            return  # the server's side went away: the client is told nothing
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    @property
    def open(self) -> int:
        """Connections open through the proxy now."""
        with self._lock:
            return len(self._open)

    def reset(self, half_open: bool = False) -> int:
        """Reset every open connection; returns how many connections were reset."""
        with self._lock:
            pairs, self._open = self._open, []
        for pair in pairs:
            if half_open:
                pair.forgotten = True
                _rst(pair.upstream)
                with self._lock:
                    self._forgotten.append(pair)
            else:
                _rst(pair.client)
                _rst(pair.upstream)
        self.resets += 1
        return len(pairs)

    def close(self) -> None:
        self._server.close()
        self.reset()
        with self._lock:
            forgotten, self._forgotten = self._forgotten, []
        for pair in forgotten:
            _rst(pair.client)
