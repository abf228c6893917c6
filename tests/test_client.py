"""The HTTP client: reconnects through a proxy that cuts the connection mid-stream, errors, dedupe, gaps."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agents_celery import (
    RunExpiredError,
    RunFinishedError,
    RunNotFoundError,
    RunNotPausedError,
    Runtime,
    ScriptedToolCall,
    ScriptedTurn,
    UnknownAgentError,
    ValidationError,
)
from agents_celery.client import Backoff, Client, RunStream
from agents_celery.client.aio import AsyncClient
from agents_celery.client.plans import error_from_response
from agents_celery.errors import AuthenticationError, ConnectionLostError, StreamGapError
from agents_celery.events import EventType
from agents_celery.testing.openai_server import ScriptResponder

from .support.apis import ApiServer, SharedApis, free_port
from .support.invariants import assert_run_sound

FAST = Backoff(attempts=8, initial=0.02, maximum=0.2)


class CuttingProxy:
    """A TCP proxy that forwards to ``upstream`` and cuts each of the first ``cuts`` event streams after
    ``after_bytes`` bytes of response (mid-frame, like a dying load balancer)."""

    def __init__(self, upstream_port: int, after_bytes: int, cuts: int) -> None:
        self.upstream_port = upstream_port
        self.after_bytes = after_bytes
        self.cuts_left = cuts
        self.cut = 0
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._open += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, [0]), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, counted: list[int] | None) -> None:
        streaming = False
        with contextlib.suppress(OSError):
            while data := src.recv(4096):
                if counted is not None:
                    streaming = streaming or b"text/event-stream" in data
                    counted[0] += len(data)
                    if streaming and counted[0] > self.after_bytes and self._take_cut():
                        dst.sendall(data[: max(1, len(data) - (counted[0] - self.after_bytes))])
                        break
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _take_cut(self) -> bool:
        with self._lock:
            if self.cuts_left <= 0:
                return False
            self.cuts_left -= 1
            self.cut += 1
            return True

    def close(self) -> None:
        self._server.close()
        for sock in self._open:
            sock.close()


@pytest.fixture(scope="module")
def api(apis: SharedApis) -> ApiServer:
    return apis.get("flask")


@pytest.fixture
def proxy(api: ApiServer) -> Iterator[CuttingProxy]:
    p = CuttingProxy(api.port, after_bytes=700, cuts=3)
    yield p
    p.close()


def long_answer(fake_openai: Any, words: int = 60, delay: float = 0.01) -> str:
    text = " ".join(f"word{i}" for i in range(words))
    fake_openai.responder = ScriptResponder([text], token_delay=delay)
    return text


def test_stream_survives_cut_connections_without_gap_or_duplicate(
    proxy: CuttingProxy, fake_openai: Any, runtime: Runtime
) -> None:
    text = long_answer(fake_openai)
    with Client(proxy.url, backoff=FAST) as client:
        stream = client.stream("fake", "talk")
        events = list(stream)
    assert_run_sound(events)
    assert events[-1].type is EventType.RUN_FINISHED
    assert proxy.cut == 3 and stream.reconnects >= 3
    assert stream.last_offset == runtime.get(stream.run_id).last_offset
    assert "".join(e.data["delta"] for e in events if e.type is EventType.TEXT_MESSAGE_CONTENT) == text
    stored = runtime.store.log.read(stream.run_id)
    assert [(e.offset, e.type, e.data) for e in stored] == [(e.offset, e.type, e.data) for e in events]


def test_follow_from_a_saved_run_id_and_offset(proxy: CuttingProxy, fake_openai: Any, runtime: Runtime) -> None:
    long_answer(fake_openai)
    with Client(proxy.url, backoff=FAST) as client:
        stream = client.stream("fake", "talk")
        first = []
        for event in stream:
            first.append(event.offset)
            if event.type is EventType.TEXT_MESSAGE_CONTENT:
                break  # the consumer goes away; it kept (run_id, offset)
        saved = (stream.run_id, stream.last_offset)
        rest = [e.offset for e in client.get_stream(saved[0]).events(saved[1])]
    assert first + rest == list(range(runtime.get(saved[0]).last_offset + 1))


def test_async_client_reconnects_too(proxy: CuttingProxy, fake_openai: Any, runtime: Runtime) -> None:
    long_answer(fake_openai)

    async def main() -> tuple[str, list[int]]:
        async with AsyncClient(proxy.url, backoff=FAST) as client:
            stream = await client.stream("fake", "talk")
            return stream.run_id, [e.offset async for e in stream]

    run_id, offsets = asyncio.run(main())
    assert offsets == list(range(runtime.get(run_id).last_offset + 1))
    assert proxy.cut == 3


def test_pause_continue_stop_and_errors(api: ApiServer, fake_openai: Any) -> None:
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/z"})]), "Done."]
    )
    with Client(api.url) as client:
        stream = client.stream("fake", "delete it")
        assert list(stream)[-1].data["outcome"]["type"] == "interrupt"
        run = client.get(stream.run_id)
        assert run.status == "paused" and run.pending[0].name == "delete_file"
        call_id = run.pending[0].id
        with pytest.raises(ValidationError):
            client.continue_run(stream.run_id, [{"tool_call_id": "nope", "confirmed": True}])
        more = client.continue_run(stream.run_id, [{"tool_call_id": call_id, "confirmed": True}])
        events = list(more)
        assert events[0].offset == stream.last_offset + 1
        assert any(e.type is EventType.TOOL_CALL_RESULT and "deleted /tmp/z" in e.data["content"] for e in events)
        assert client.get(stream.run_id).status == "completed"
        with pytest.raises(RunNotPausedError):
            client.continue_run(stream.run_id)
        with pytest.raises(RunFinishedError):
            client.stop(stream.run_id)
        with pytest.raises(RunNotFoundError):
            client.get("0" * 32)
        with pytest.raises(UnknownAgentError):
            client.stream("no-such-agent", "hi")


def test_stop_a_running_run(api: ApiServer, fake_openai: Any) -> None:
    long_answer(fake_openai, words=300, delay=0.05)
    with Client(api.url) as client:
        stream = client.stream("fake", "talk")
        stopped = False
        for event in stream:
            if event.type is EventType.TEXT_MESSAGE_CONTENT and not stopped:  # once: the run may end before the
                client.stop(stream.run_id)  # next delta is read, and stopping an ended run is refused
                stopped = True
        assert stopped and event.data["outcome"]["type"] == "cancelled"
        assert client.get(stream.run_id).status == "cancelled"


def test_a_delayed_run_waits_scheduled(api: ApiServer) -> None:
    with Client(api.url) as client:
        stream = client.stream("offline", "later", start_after=60)
        assert client.get(stream.run_id).status == "scheduled"
        assert client.stop(stream.run_id).status == "cancelled"


def test_bearer_api_key(worker: Any, worker_env: dict[str, str]) -> None:
    server = ApiServer({**worker_env, "AGENTS_CELERY_API_KEY": "s3cret"}).wait_ready()
    try:
        with Client(server.url, api_key="wrong") as client, pytest.raises(AuthenticationError):
            client.agents()
        with Client(server.url, api_key="s3cret") as client:
            assert "fake" in [a["name"] for a in client.agents()]
    finally:
        server.stop()


# -- without a server: httpx.MockTransport -----------------------------------------------------------------


def sse(*offsets: int, end: bool = True) -> bytes:
    body = b""
    for i in offsets:
        kind = "RUN_FINISHED" if end and i == offsets[-1] else "CUSTOM"
        extra = '"outcome":{"type":"success"}' if kind == "RUN_FINISHED" else '"name":"n","value":1'
        body += f'id: {i}\nevent: {kind}\ndata: {{"offset":{i},"type":"{kind}","run_id":"r",{extra}}}\n\n'.encode()
    return body


class _Broken(httpx.SyncByteStream):
    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        yield self.data
        raise httpx.ReadError("connection reset by peer")


def test_reconnects_with_last_event_id_and_dedupes() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Last-Event-ID"))
        if len(seen) == 1:  # cut mid-frame after offsets 0 and 1
            return httpx.Response(200, stream=_Broken(sse(0, 1, end=False) + b"id: 2\ndata: {"))
        return httpx.Response(200, content=sse(0, 1, 2, 3))  # a server that replays too much: deduped

    with Client("http://api", transport=httpx.MockTransport(handler), backoff=FAST) as client:
        stream = RunStream(client, "r", "a", "s", -1, True)
        assert [e.offset for e in stream] == [0, 1, 2, 3]
    assert seen == [None, "1"] and stream.reconnects == 1


def test_a_gap_raises() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=sse(0, 1, 3)))
    with Client("http://api", transport=transport) as client, pytest.raises(StreamGapError, match="offset 3"):
        list(RunStream(client, "r", "a", "s", -1, True))


def test_gives_up_after_the_retry_budget_naming_the_offset() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=_Broken(sse(0, end=False))))
    budget = Backoff(2, 0.001, 0.001)
    with (
        Client("http://api", transport=transport, backoff=budget) as client,
        pytest.raises(ConnectionLostError) as info,
    ):
        list(RunStream(client, "r", "a", "s", -1, True))
    assert ".events(0)" in str(info.value)
    assert info.value.last_offset == 0


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (404, "run_not_found", RunNotFoundError),
        (404, "unknown_agent", UnknownAgentError),
        (409, "run_not_paused", RunNotPausedError),
        (410, "run_expired", RunExpiredError),
        (422, "invalid_tool_arguments", ValidationError),
        (400, "bad_request", ValidationError),
    ],
)
def test_error_mapping(status: int, code: str, cls: type[Exception]) -> None:
    error = error_from_response(status, f'{{"detail": "because", "code": "{code}"}}'.encode())
    assert isinstance(error, cls) and str(error) == "because"


def test_errors_come_from_the_one_error_tree() -> None:
    """One class per code, in agents_celery.errors: a process that imports the API gets the same classes."""
    import agents_celery.contrib.flask  # noqa: F401  (the API's module is loaded too)

    error = error_from_response(401, b'{"detail": "no key", "code": "unauthorized"}')
    assert type(error) is AuthenticationError and type(error).__module__ == "agents_celery.errors"


def test_runs_and_sessions_through_both_clients(api: ApiServer, fake_openai: Any) -> None:
    from agents_celery import RunLiveError, SessionNotFoundError

    session = f"client-{uuid.uuid4().hex[:8]}"
    fake_openai.responder = ScriptResponder([ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/z"})])])
    with Client(api.url) as client:
        paused = client.run("fake", "delete it", timeout=30)
        with pytest.raises(RunLiveError):  # 409 run_live, raised as its class
            client.delete_run(paused.run_id)
        client.stop(paused.run_id)
        fake_openai.responder = ScriptResponder(["Hi."] * 4)
        first = client.run("fake", "one", session_id=session, timeout=30)
        second = client.run("fake", "two", session_id=session, timeout=30)
        page = client.runs(session_id=session, limit=1)
        assert [r.run_id for r in page.runs] == [second.run_id] and page.next_cursor
        rest = client.runs(session_id=session, cursor=page.next_cursor)
        assert [r.run_id for r in rest.runs] == [first.run_id] and rest.next_cursor is None
        assert [r.run_id for r in client.session(session).runs] == [second.run_id, first.run_id]
        client.delete_run(first.run_id)
        assert [r.run_id for r in client.runs(session_id=session, status="completed").runs] == [second.run_id]

    async def with_async_client() -> None:
        async with AsyncClient(api.url) as aclient:
            sessions = (await aclient.sessions(limit=200)).sessions
            assert session in [s.session_id for s in sessions]
            view = await aclient.session(session)
            assert [m["content"] for m in view.messages if m["role"] == "user"] == ["one", "two"]
            await aclient.delete_session(session)
            with pytest.raises(SessionNotFoundError):
                await aclient.session(session)
            assert (await aclient.runs(session_id=session)).runs == []

    asyncio.run(with_async_client())


class BusyThenAccepted:
    """A mock API: ``GET /runs/r`` (paused at offset 4), and a continue answered 409 ``run_busy`` ``busy`` times,
    then 202. Records every request as ``METHOD path``."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.seen: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(f"{request.method} {request.url.path}")
        if request.method == "GET":
            view = {"run_id": "r", "agent_id": "a", "session_id": "s", "status": "paused", "last_offset": 4}
            return httpx.Response(200, json=view)
        if self.busy:
            self.busy -= 1
            return httpx.Response(409, json={"detail": "a worker holds the run", "code": "run_busy"})
        assert request.read() == b'{"tools":[],"stream":false,"background":true}'
        return httpx.Response(202, json={"run_id": "r", "session_id": "s", "status": "queued"})


@pytest.mark.parametrize("busy", [2, 7])
def test_both_clients_retry_a_busy_continue_then_give_up(busy: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The twins carry out one plan: the continue is retried while the run is busy (6 retries), then RunBusyError;
    the stream starts at the pause's offset."""
    from agents_celery.client import plans
    from agents_celery.errors import RunBusyError

    monkeypatch.setattr(plans, "BUSY_RETRIES", (0.001,) * 6 + (None,))  # the same count, without the waits
    continue_path = "POST /agents/a/runs/r/continue"
    sync_api, async_api = BusyThenAccepted(busy), BusyThenAccepted(busy)
    with Client("http://api", transport=httpx.MockTransport(sync_api)) as client:
        if busy > 6:
            with pytest.raises(RunBusyError, match="holds the run"):
                client.continue_run("r")
        else:
            assert client.continue_run("r").last_offset == 4

    async def continue_async() -> int:
        async with AsyncClient("http://api", transport=httpx.MockTransport(async_api)) as client:
            return (await client.continue_run("r")).last_offset

    if busy > 6:
        with pytest.raises(RunBusyError, match="holds the run"):
            asyncio.run(continue_async())
    else:
        assert asyncio.run(continue_async()) == 4
    expected = ["GET /runs/r"] + [continue_path] * min(busy + 1, 7)
    assert sync_api.seen == async_api.seen == expected
