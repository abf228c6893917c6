"""Test helpers shipped for users: a local OpenAI-compatible server that plays scripted replies.

Like httpx's ``MockTransport``, but a real HTTP server, so the real ``openai`` SDK (and a real worker process)
can talk to it::

    with FakeOpenAIServer(ScriptResponder(["Hello there!"])) as server:
        model = OpenAIChat("gpt-4o-mini", base_url=server.url)
        ...
        assert server.calls == 1

A *responder* maps the JSON body of a ``POST /v1/chat/completions`` request to a :class:`FakeReply`. It can be
swapped while the server runs (``server.responder = ...``). :class:`ScriptResponder` picks turns with the same
rule as :class:`~agents_celery.models.ScriptedModel`; :class:`FailingResponder` injects failures;
:class:`SchemaResponder` answers structured-output requests with scripted JSON (valid, invalid, then valid...).
The responders live in :mod:`agents_celery.testing.responders` (re-exported here); this module is the HTTP side.

From a shell (for a worker, a bench or another language's tests)::

    python -m agents_celery.testing.openai_server --port 8011 --tokens 50 --token-delay 0.01

serves until interrupted (Ctrl-C or SIGTERM), answering every request with ``--tokens`` streamed words (or
``--text``); it prints ``fake OpenAI server on http://127.0.0.1:8011/v1`` once it listens (``--port 0``, the
default, picks a free port: read the URL from that line). Any API key is accepted. With ``--held`` every stream
waits before its first chunk until ``POST /release`` (:func:`release`): a test holds a thousand turns in flight for
as long as the worker takes to start them all, then lets them end together.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http
import json
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import SHUT_RDWR, socket
from types import TracebackType
from typing import Any, Self

from ..models.scripted import ScriptedToolCall, ScriptedTurn, split_tokens, word_count
from ..models.scripted import turn_index as turn_index  # tests import it from here
from .responders import (
    FailingResponder,
    FakeReply,
    Responder,
    SchemaResponder,
    ScriptResponder,
    SummaryResponder,
    format_problem,
    retries_sent,
)

__all__ = [
    "FailingResponder",
    "FakeOpenAIServer",
    "FakeReply",
    "Responder",
    "SchemaResponder",
    "ScriptResponder",
    "SummaryResponder",
    "format_problem",
    "retries_sent",
]

#: OpenAI's ``error.type`` and ``error.code`` for common statuses.
_ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}
#: How often a held stream (``held``) sends an SSE comment while it waits to be released.
HELD_PING_SECONDS = 10.0
_CONNECTION_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class FakeOpenAIServer:
    """A local OpenAI-compatible HTTP server, run in a daemon thread.

    Serves ``POST /v1/chat/completions`` (streaming as server-sent events, exactly in OpenAI's chunk format, or
    not) and ``GET /v1/models``; anything else is a JSON 404.

    Args:
        responder: Maps each request body to a reply; defaults to a one-turn :class:`ScriptResponder`.
        host: Interface to listen on.
        port: Port; 0 picks a free one.
        held: Streams wait before their first chunk until :meth:`release` (or ``POST /release``).

    Attributes:
        responder: The current responder; may be replaced while the server runs.
    """

    def __init__(
        self, responder: Responder | None = None, *, host: str = "127.0.0.1", port: int = 0, held: bool = False
    ) -> None:
        self.responder: Responder = responder or ScriptResponder(["Hello from the fake OpenAI server."])
        #: Set while streams may go on (always, unless ``held`` and not yet released).
        self.released = threading.Event()
        if not held:
            self.released.set()
        self.host = host
        self.port = port
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._connections: set[socket] = set()

    @property
    def url(self) -> str:
        """Base URL for an OpenAI client, such as ``http://127.0.0.1:54321/v1``."""
        if self._httpd is None:
            raise RuntimeError("FakeOpenAIServer is not started; call start() or use it as a context manager")
        return f"http://{self.host}:{self._httpd.server_address[1]}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat completion requests received so far (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def calls(self) -> int:
        """How many chat completion requests were received."""
        with self._lock:
            return len(self._requests)

    def release(self) -> None:
        """Let held streams go on (see ``held``); streams started later are not held."""
        self.released.set()

    def start(self) -> Self:
        """Bind the port and start serving in a daemon thread.

        Returns:
            This server.

        Raises:
            RuntimeError: it is already started.
            OSError: the port cannot be bound.
        """
        if self._httpd is not None:
            raise RuntimeError("FakeOpenAIServer is already started")
        httpd = _HTTPServer((self.host, self.port), _Handler)
        httpd.fake = self
        self._httpd = httpd
        # A short poll interval keeps stop() fast: shutdown() waits for the serving loop to notice.
        serve = functools.partial(httpd.serve_forever, poll_interval=0.02)
        self._thread = threading.Thread(target=serve, name="fake-openai-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut open connections and wait for the handler threads; safe to call twice."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        httpd.shutdown()
        self.released.set()  # a held stream ends too
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            # Wakes a handler blocked on a kept-alive connection, or one sleeping between tokens.
            with contextlib.suppress(OSError):
                conn.shutdown(SHUT_RDWR)
        httpd.server_close()  # joins the handler threads
        thread.join()
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _record(self, request: dict[str, Any]) -> int:
        with self._lock:
            self._requests.append(request)
            return len(self._requests)

    def _track(self, conn: socket, *, alive: bool) -> None:
        with self._lock:
            if alive:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    #: The listen backlog: a thousand clients connecting at once (a gevent worker's runs) are not dropped and
    #: retried a second later, as with socketserver's default of 5.
    request_queue_size = 1024
    fake: FakeOpenAIServer

    def process_request(self, request: Any, client_address: Any) -> None:
        # Tracked here, in the serving thread, so that stop() (after shutdown()) sees every connection.
        self.fake._track(request, alive=True)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.fake._track(request, alive=False)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away is normal (a stopped run, a test that is done); anything else is printed.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer
    #: A kept-alive connection idle for this long is closed, so a forgotten client cannot hold a thread forever.
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_GET(self) -> None:
        if self.path.split("?")[0].rstrip("/") == "/v1/models":
            models = [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "agents-celery"}]
            self._send_json(200, {"object": "list", "data": models})
        else:
            self._send_error(404, f"Unknown request URL: GET {self.path}", "unknown_url")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.split("?")[0].rstrip("/") == "/release":
            self.server.fake.release()
            self._send_json(200, {"released": True})
            return
        if self.path.split("?")[0].rstrip("/") != "/v1/chat/completions":
            self._send_error(404, f"Unknown request URL: POST {self.path}", "unknown_url")
            return
        try:
            request = json.loads(body)
        except json.JSONDecodeError as exc:
            self._send_error(400, f"We could not parse the JSON body of your request: {exc}")
            return
        if not isinstance(request, dict):
            self._send_error(400, "The request body must be a JSON object")
            return
        number = self.server.fake._record(request)
        try:
            reply = self.server.fake.responder(request)
        except Exception as exc:
            self._send_error(500, f"responder failed: {type(exc).__name__}: {exc}")
            return
        try:
            self._answer(request, reply, number)
        except _CONNECTION_ERRORS:
            self.close_connection = True

    def _answer(self, request: dict[str, Any], reply: FakeReply, number: int) -> None:
        if reply.status >= 400:
            self._send_error(reply.status, reply.error)
            return
        completion = _Completion.build(request, reply, number)
        if request.get("stream"):
            self._send_stream(completion, reply)
        else:
            self._send_json(reply.status, completion.message_object())

    def _send_stream(self, completion: _Completion, reply: FakeReply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while not self.server.fake.released.wait(HELD_PING_SECONDS):  # well inside a client's read timeout
            self._write_chunk(b": held\n\n")
        while reply.hang:  # ends when the client closes the connection (the write fails)
            self._write_chunk(b": ping\n\n")
            time.sleep(reply.token_delay or 0.1)
        for event in completion.stream_events(reply):
            self._write_chunk(f"data: {json.dumps(event)}\n\n".encode())
        self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        # Flushed one by one, so a client sees each token when it is "generated".
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_error(self, status: int, message: str | None, code: str | None = None) -> None:
        kind, default_code = _ERROR_KINDS.get(
            status, ("server_error" if status >= 500 else "invalid_request_error", None)
        )
        text = message or _status_phrase(status)
        self._send_json(status, {"error": {"message": text, "type": kind, "param": None, "code": code or default_code}})


@dataclass(frozen=True)
class _Completion:
    """One answer, ready to be sent as a ``chat.completion`` object or as ``chat.completion.chunk`` events."""

    id: str
    model: str
    created: int
    text: str
    tool_calls: list[dict[str, Any]]
    usage: dict[str, int]
    include_usage: bool

    @classmethod
    def build(cls, request: dict[str, Any], reply: FakeReply, number: int) -> _Completion:
        calls: list[dict[str, Any]] = [
            {
                "id": call.id or f"call_{number}_{i}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for i, call in enumerate(reply.tool_calls)
        ]
        prompt = word_count(request.get("messages") or [])
        completion = len(reply.text.split()) + sum(len(call.arguments_json().split()) for call in reply.tool_calls)
        options = request.get("stream_options") or {}
        return cls(
            id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
            model=str(request.get("model") or "fake-model"),
            created=int(time.time()),
            text=reply.text,
            tool_calls=calls,
            usage={"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
            include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        )

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"

    def _base(self, kind: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
        }

    def message_object(self) -> dict[str, Any]:
        """The non-streaming ``chat.completion`` object."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None, "refusal": None}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": self.finish_reason}
        return {**self._base("chat.completion"), "choices": [choice], "usage": self.usage}

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        chunk = {**self._base("chat.completion.chunk"), "choices": [choice]}
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def stream_events(self, reply: FakeReply) -> Iterator[dict[str, Any]]:
        """The ``chat.completion.chunk`` objects, in OpenAI's order; sleeps ``token_delay`` before each text chunk."""
        yield self._chunk({"role": "assistant", "content": "", "refusal": None})
        for piece in _text_pieces(self.text, reply.chunk_words):
            if reply.token_delay:
                time.sleep(reply.token_delay)
            yield self._chunk({"content": piece})
        for index, call in enumerate(self.tool_calls):
            yield from self._tool_call_chunks(index, call)
        yield self._chunk({}, self.finish_reason)
        if self.include_usage:
            yield {**self._base("chat.completion.chunk"), "choices": [], "usage": self.usage}

    def _tool_call_chunks(self, index: int, call: dict[str, Any]) -> Iterator[dict[str, Any]]:
        # As OpenAI does: id, type and name first with empty arguments, then the arguments in pieces.
        first = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        yield self._chunk({"tool_calls": [first]})
        arguments: str = call["function"]["arguments"]
        half = len(arguments) // 2
        for part in (arguments[:half], arguments[half:]):
            if part:
                yield self._chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})


def _text_pieces(text: str, words: int) -> Iterator[str]:
    tokens = split_tokens(text)
    size = max(1, words)
    for start in range(0, len(tokens), size):
        yield "".join(tokens[start : start + size])


def _status_phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


#: The words ``--tokens N`` cycles through.
_FILLER = ["The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "as", "the", "run", "streams", "on."]


def filler_text(tokens: int) -> str:
    """``tokens`` words of filler text (one streamed chunk each), ending with a full stop."""
    words = [_FILLER[i % len(_FILLER)] for i in range(max(1, tokens))]
    return " ".join(words).rstrip(".") + "."


@contextlib.contextmanager
def server_process(tokens: int, token_delay: float, *, held: bool = False) -> Iterator[str]:
    """This server in a process of its own (:func:`main`: a thread per stream, its work off the caller's
    interpreter), every completion ``tokens`` words ``token_delay`` seconds apart (``held``: each stream waits
    for :func:`release` first); yields its ``/v1`` URL and stops the process on exit. What a test or a bench of a
    thousand streams at once uses."""
    import re
    import subprocess

    cmd = [sys.executable, "-m", __name__, "--tokens", str(tokens), "--token-delay", str(token_delay)]
    cmd += ["--held"] if held else []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        match = re.search(r"(http://\S+)", line)
        if not match:
            raise RuntimeError(f"the fake OpenAI server did not start: {line!r}")
        yield match.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


def release(url: str) -> None:
    """Let the held streams of the server at ``url`` (its ``/v1`` URL) go on: ``POST /release``."""
    import urllib.request

    request = urllib.request.Request(url.removesuffix("/v1") + "/release", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agents_celery.testing.openai_server``: serve scripted answers until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m agents_celery.testing.openai_server",
        description="A local OpenAI-compatible server (Chat Completions, streamed or not) answering every request "
        "with the same scripted text. Point OpenAIChat(base_url=...) or any OpenAI SDK at the URL it prints.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: a free one, printed at start-up)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--tokens", type=int, default=20, help="answer with this many words, one chunk each (default 20)")
    what.add_argument("--text", help="answer with this text instead")
    parser.add_argument("--token-delay", type=float, default=0.0, help="seconds before each streamed chunk (default 0)")
    parser.add_argument("--held", action="store_true", help="streams wait before their first chunk until POST /release")
    parser.add_argument(
        "--tool-call",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="the first turn calls tool NAME with these arguments (a JSON object; repeat for more calls), and the "
        "turn after the tool results answers the text",
    )
    args = parser.parse_args(argv)
    if args.tokens < 1:
        parser.error("--tokens must be at least 1")
    text = args.text if args.text is not None else filler_text(args.tokens)
    calls = []
    for item in args.tool_call:
        name, sep, raw = item.partition("=")
        try:
            arguments = json.loads(raw) if sep else None
        except ValueError:
            arguments = None
        if not name or not isinstance(arguments, dict):
            parser.error(f"--tool-call {item!r}: give NAME={{...}} with a JSON object of arguments")
        calls.append(ScriptedToolCall(name, arguments))
    turns: list[ScriptedTurn | str] = [ScriptedTurn("", calls), text] if calls else [text]
    responder = ScriptResponder(turns, token_delay=args.token_delay)
    server = FakeOpenAIServer(responder, host=args.host, port=args.port, held=args.held)
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    with server:
        print(f"fake OpenAI server on {server.url}", flush=True)
        stopped.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
