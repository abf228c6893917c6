"""A small TCP proxy for tests: it cuts each connection ``cut_after`` seconds after it opened, or once no byte went
either way for ``idle`` seconds (a load balancer's idle timeout)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class CuttingProxy:
    """Listens on a free local port and forwards to ``target_port`` (threads: one per direction)."""

    def __init__(self, target_port: int, *, cut_after: float | None = None, idle: float | None = None) -> None:
        self.target_port, self.cut_after, self.idle = target_port, cut_after, idle
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cuts = 0
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._watch, args=(client, upstream), daemon=True).start()

    def _watch(self, client: socket.socket, upstream: socket.socket) -> None:
        opened = [time.monotonic()]
        last = [opened[0]]
        done = threading.Event()
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(src, dst, last, done), daemon=True).start()
        while not done.wait(0.05):
            now = time.monotonic()
            if (self.cut_after is not None and now - opened[0] > self.cut_after) or (
                self.idle is not None and now - last[0] > self.idle
            ):
                self.cuts += 1
                break
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, last: list[float], done: threading.Event) -> None:
        try:
            while data := src.recv(65536):
                last[0] = time.monotonic()
                dst.sendall(data)
        except OSError:
            pass
        done.set()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
