"""A2A's official Python client (PyPI ``a2a-sdk`` 1.3: ``create_client``, its JSON-RPC transport, with its
defaults) against ``/a2a/<agent_id>``: a real API server (Flask and Django), a real worker, real Redis. The
client parses every answer into its own protobuf types; the task a stream reader holds is built with the SDK's own
artifact merge (``append_artifact_to_task``)."""

from __future__ import annotations

import asyncio
import base64
import threading
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

import httpx
import pytest
import redis
from a2a.client import ClientConfig, ClientFactory, create_client
from a2a.client.client import Client
from a2a.server.tasks.task_manager import append_artifact_to_task
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from google.protobuf import json_format, struct_pb2

from agents_celery.models import ScriptedToolCall, ScriptedTurn

from .conftest import TEST_REDIS_URL, wait_for
from .support.apis import ApiServer, SharedApis
from .support.invariants import counter_of

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")


@pytest.fixture(scope="module", params=["flask", "django"])
def api(request: pytest.FixtureRequest, apis: SharedApis) -> ApiServer:
    return apis.get(request.param)


@pytest.fixture
def rdb() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(TEST_REDIS_URL)
    yield client
    client.close()


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 100))


class Connected:
    """An SDK client of one agent, over an httpx client of ours (60 s timeout: a blocking SendMessage waits)."""

    def __init__(self, client: Client, http: httpx.AsyncClient) -> None:
        self.client, self.http = client, http

    async def close(self) -> None:
        await self.client.close()
        await self.http.aclose()


async def connect(base: str, agent: str = "fake", *, streaming: bool = True, **headers: str) -> Connected:
    http = httpx.AsyncClient(timeout=60, headers=headers)
    client = await create_client(f"{base}/a2a/{agent}", ClientConfig(httpx_client=http, streaming=streaming))
    return Connected(client, http)


def ask(text: str, *, blocking: bool = True, **fields: Any) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)], **fields)
    return SendMessageRequest(message=message, configuration=SendMessageConfiguration(return_immediately=not blocking))


async def collect(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    return [ev async for ev in stream]


def folded(events: list[StreamResponse]) -> Task:
    """The task a reader of the stream holds: the first event's Task, each update applied as the SDK applies it."""
    assert events and events[0].HasField("task"), events[:1]
    task = Task()
    task.CopyFrom(events[0].task)
    for ev in events[1:]:
        if ev.HasField("artifact_update"):
            append_artifact_to_task(task, ev.artifact_update)
        elif ev.HasField("status_update"):
            task.status.CopyFrom(ev.status_update.status)
    return task


def texts(task: Task) -> dict[str, str]:
    return {a.artifact_id: "".join(p.text for p in a.parts) for a in task.artifacts}


def test_the_card_names_the_agent_its_tools_and_its_interface(api: ApiServer) -> None:
    card = httpx.get(f"{api.url}/a2a/fake/.well-known/agent-card.json").json()
    assert card["name"] == "fake" and card["capabilities"]["streaming"] is True
    assert {"add", "delete_file"} <= {s["id"] for s in card["skills"]}
    (interface,) = card["supportedInterfaces"]
    assert interface == {"url": f"{api.url}/a2a/fake", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}

    async def through_the_sdk() -> str:
        c = await connect(api.url)
        try:
            return (await c.client.get_extended_agent_card(GetExtendedAgentCardRequest())).name  # the card it read
        finally:
            await c.close()

    assert run(through_the_sdk()) == "fake"
    assert httpx.get(f"{api.url}/a2a/nobody/.well-known/agent-card.json").status_code == 404


def test_a_streamed_task_runs_to_completion_with_its_tool_once(
    api: ApiServer, script: Any, rdb: redis.Redis, key_prefix: str
) -> None:
    script(ScriptedTurn("Adding.", [ScriptedToolCall("add", {"a": 2, "b": 3})]), "It is 5.")
    context = uuid.uuid4().hex
    count = counter_of(rdb, key_prefix)
    before = count("add")

    async def scenario() -> tuple[list[StreamResponse], Task]:
        c = await connect(api.url)
        try:
            events = await collect(c.client.send_message(ask("2+3?", context_id=context)))
            got = await c.client.get_task(GetTaskRequest(id=events[0].task.id, history_length=1))
            return events, got
        finally:
            await c.close()

    events, got = run(scenario())
    task = folded(events)
    assert task.context_id == context and task.status.state == TaskState.TASK_STATE_COMPLETED
    assert texts(task) == {"text-0": "Adding.", "text-1": "It is 5."}
    last = events[-1].status_update.status if len(events) > 1 else events[0].task.status
    assert last.state == TaskState.TASK_STATE_COMPLETED  # the stream ends there
    updates = [e.status_update.status.message for e in events if e.HasField("status_update")]
    datas = [dict(m.parts[0].data.struct_value) for m in updates if m.parts and m.parts[0].HasField("data")]
    assert [sorted(d) for d in datas] == [["tool_call"], ["tool_result"]]
    assert count("add") - before == 1
    assert got.id == task.id and got.status.state == TaskState.TASK_STATE_COMPLETED
    assert texts(got) == texts(task)  # GetTask's snapshot is what the stream built
    assert [m.role for m in got.history] == [Role.ROLE_AGENT]  # history_length=1: the last message only
    run_json = httpx.get(f"{api.url}/runs/{task.id}").json()
    assert run_json["session_id"] == context  # a task is a run, its context the session


def test_a_blocking_send_answers_the_finished_task_and_return_immediately_does_not_wait(
    api: ApiServer, script: Any
) -> None:
    script("Done at once.")

    async def scenario() -> tuple[Task, Task, Task]:
        c = await connect(api.url, streaming=False)
        try:
            (done,) = await collect(c.client.send_message(ask("go")))
            script(" ".join(f"w{i}" for i in range(30)), token_delay=0.02)
            (early,) = await collect(c.client.send_message(ask("go", blocking=False)))
            later = await c.client.get_task(GetTaskRequest(id=early.task.id))
            for _ in range(200):
                if later.status.state == TaskState.TASK_STATE_COMPLETED:
                    break
                await asyncio.sleep(0.05)
                later = await c.client.get_task(GetTaskRequest(id=early.task.id))
            return done.task, early.task, later
        finally:
            await c.close()

    done, early, later = run(scenario())
    assert done.status.state == TaskState.TASK_STATE_COMPLETED and texts(done) == {"text-0": "Done at once."}
    assert [m.parts[0].text for m in done.history] == ["go", "Done at once."]
    assert early.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    assert later.status.state == TaskState.TASK_STATE_COMPLETED
    assert texts(later) == {"text-0": " ".join(f"w{i}" for i in range(30))}


def test_cancel_mid_answer_ends_the_stream_canceled(api: ApiServer, script: Any) -> None:
    script(" ".join(f"w{i}" for i in range(400)), token_delay=0.02)

    async def scenario() -> tuple[list[StreamResponse], Task]:
        c = await connect(api.url)
        other = await connect(api.url)
        try:
            events: list[StreamResponse] = []
            canceled = None
            async for ev in c.client.send_message(ask("talk")):
                events.append(ev)
                if canceled is None and ev.HasField("artifact_update"):
                    canceled = await other.client.cancel_task(CancelTaskRequest(id=events[0].task.id))
            assert canceled is not None
            return events, canceled
        finally:
            await c.close()
            await other.close()

    events, canceled = run(scenario())
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    assert 0 < len(texts(folded(events))["text-0"]) < len(" ".join(f"w{i}" for i in range(400)))

    async def again() -> None:
        c = await connect(api.url)
        try:
            with pytest.raises(Exception) as refused:
                await c.client.cancel_task(CancelTaskRequest(id=canceled.id))
            assert "TaskNotCancelable" in type(refused.value).__name__, refused.value
            with pytest.raises(UnsupportedOperationError):  # the spec's error for a terminal task
                await collect(c.client.subscribe(SubscribeToTaskRequest(id=canceled.id)))
        finally:
            await c.close()

    run(again())


def test_an_unknown_task_is_task_not_found(api: ApiServer) -> None:
    async def scenario() -> None:
        c = await connect(api.url)
        try:
            with pytest.raises(TaskNotFoundError):
                await c.client.get_task(GetTaskRequest(id="no-such-task"))
            with pytest.raises(TaskNotFoundError):
                await collect(c.client.subscribe(SubscribeToTaskRequest(id="no-such-task")))
        finally:
            await c.close()

    run(scenario())


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", -32700),
        (b"[1, 2]", -32600),
        (b'{"jsonrpc": "1.0", "method": "GetTask", "id": 1}', -32600),
        (b'{"jsonrpc": "2.0", "method": "NoSuchMethod", "id": 1}', -32601),
        (b'{"jsonrpc": "2.0", "method": "GetTask", "id": 1, "params": {}}', -32602),
        (b'{"jsonrpc": "2.0", "method": "SendMessage", "id": 1, "params": {"message": {"parts": []}}}', -32602),
        (b'{"jsonrpc": "2.0", "method": "GetTask", "id": 1, "params": {"id": "x", "historyLength": -1}}', -32602),
        (b'{"jsonrpc": "2.0", "method": "ListTasks", "id": 1, "params": {"status": "TASK_STATE_NAPPING"}}', -32602),
        (b'{"jsonrpc": "2.0", "method": "CreateTaskPushNotificationConfig", "id": 1, "params": {"url": "x"}}', -32602),
        (b'{"jsonrpc": "2.0", "method": "GetExtendedAgentCard", "id": 1}', -32004),
    ],
)
def test_bad_requests_are_json_rpc_errors_never_a_500(api: ApiServer, body: bytes, code: int) -> None:
    resp = httpx.post(f"{api.url}/a2a/fake", content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["jsonrpc"] == "2.0" and answer["error"]["code"] == code, answer
    assert answer["id"] == (1 if b'"id": 1' in body else None)


def test_a_file_by_url_that_is_no_image_is_refused_and_starts_nothing(api: ApiServer) -> None:
    context = uuid.uuid4().hex
    part = {"url": "https://x/report.pdf", "mediaType": "application/pdf"}
    message = {"messageId": "m1", "role": "ROLE_USER", "contextId": context, "parts": [part]}
    body = {"jsonrpc": "2.0", "method": "SendMessage", "id": "a", "params": {"message": message}}
    answer = httpx.post(f"{api.url}/a2a/fake", json=body).json()
    assert answer["error"]["code"] == -32005 and "raw" in answer["error"]["message"], answer
    assert httpx.get(f"{api.url}/runs", params={"session_id": context}).json()["runs"] == []


def test_an_image_sent_raw_reaches_the_model(api: ApiServer, script: Any, fake_openai: Any) -> None:
    script("A very small picture.")
    png = b"\x89PNG\r\n\x1a\n" + bytes(64)
    image = Part(raw=png, media_type="image/png", filename="dot.png")

    async def scenario() -> Task:
        c = await connect(api.url, streaming=False)
        try:
            message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text="What is it?"), image])
            (done,) = await collect(c.client.send_message(SendMessageRequest(message=message)))
            return done.task
        finally:
            await c.close()

    seen = len(fake_openai.requests)
    task = run(scenario())
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    (user,) = [m for m in fake_openai.requests[seen]["messages"] if m["role"] == "user"]
    encoded = base64.b64encode(png).decode()
    assert user["content"] == [
        {"type": "text", "text": "What is it?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}},
    ]


def test_a_message_sent_again_is_the_same_task(api: ApiServer, script: Any) -> None:
    script("Once.")
    context = uuid.uuid4().hex
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "contextId": context, "parts": [{"text": "hi"}]}
    body = {"jsonrpc": "2.0", "method": "SendMessage", "id": 1, "params": {"message": message}}
    first = httpx.post(f"{api.url}/a2a/fake", json=body, timeout=60).json()["result"]["task"]
    second = httpx.post(f"{api.url}/a2a/fake", json=body, timeout=60).json()["result"]["task"]
    assert first["id"] == second["id"] and second["status"]["state"] == "TASK_STATE_COMPLETED"
    wait_for(lambda: len(httpx.get(f"{api.url}/runs", params={"session_id": context}).json()["runs"]) == 1)


# -- a second user, in a host's Flask app (its users by a header, as a test stands for a login) -------------------


def own(action: str, user_id: str | None, resource: Any, agent_id: str | None) -> bool:
    """The host's rule: signed-in users only; what a user made is theirs."""
    return user_id is not None and (resource is None or resource.user_id == user_id)


@pytest.fixture
def host(fast_settings: Any, worker: Any) -> Iterator[str]:
    """A host's Flask app with the blueprint at /ai and its users, served over HTTP in this process."""
    from flask import Flask, request
    from werkzeug.serving import make_server

    from agents_celery import Runtime
    from agents_celery.contrib.flask import close_app, init_app, make_blueprint

    app = Flask("host")
    init_app(app, Runtime(settings=fast_settings), authorize=own, user_id=lambda: request.headers.get("X-User"))  # type: ignore[arg-type]
    app.register_blueprint(make_blueprint(), url_prefix="/ai")
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.port}/ai"
    server.shutdown()
    thread.join(timeout=10)
    close_app(app)


def test_another_user_gets_task_not_found_for_every_method(host: str) -> None:
    async def scenario() -> tuple[Task, list[str]]:
        bob, eve = (
            await connect(host, "offline", **{"X-User": "bob"}),
            await connect(host, "offline", **{"X-User": "eve"}),
        )
        try:
            (done,) = [ev.task async for ev in bob.client.send_message(ask("hi")) if ev.HasField("task")][:1]
            task_id = done.id
            refused = []
            for call in (
                eve.client.get_task(GetTaskRequest(id=task_id)),
                eve.client.cancel_task(CancelTaskRequest(id=task_id)),
                collect(eve.client.subscribe(SubscribeToTaskRequest(id=task_id))),
                collect(eve.client.send_message(ask("mine now", task_id=task_id))),
            ):
                with pytest.raises(TaskNotFoundError) as err:
                    await call
                refused.append(str(err.value))
            listed = await eve.client.list_tasks(ListTasksRequest())
            assert task_id not in [t.id for t in listed.tasks]
            assert task_id in [t.id for t in (await bob.client.list_tasks(ListTasksRequest())).tasks]
            return await bob.client.get_task(GetTaskRequest(id=task_id)), refused
        finally:
            await bob.close()
            await eve.close()

    mine, refused = run(scenario())
    assert mine.status.state in (
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_SUBMITTED,
    )
    assert len(refused) == 4 and all("does not exist" in r for r in refused), refused  # worded as for no task at all


# -- a tool that needs a human: INPUT_REQUIRED, answered by a follow-up message on the task ------------------------


def decisions(*entries: dict[str, Any], task_id: str, context_id: str) -> SendMessageRequest:
    value = json_format.ParseDict({"decisions": list(entries)}, struct_pb2.Value())
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(data=value)],
        task_id=task_id,
        context_id=context_id,
    )
    return SendMessageRequest(message=message)


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "blocking"])
def test_input_required_is_answered_by_a_message_on_the_task_and_the_tool_runs_once(
    api: ApiServer, script: Any, rdb: redis.Redis, key_prefix: str, streaming: bool
) -> None:
    path = f"/tmp/{uuid.uuid4().hex}"
    script(ScriptedTurn("Deleting.", [ScriptedToolCall("delete_file", {"path": path})]), "Done, it is gone.")

    async def scenario() -> tuple[list[StreamResponse], list[StreamResponse], Task]:
        c = await connect(api.url, streaming=streaming)
        try:
            asked = await collect(c.client.send_message(ask("delete it")))
            paused = folded(asked).status  # a run that paused before the stream began: the Task alone says so
            task_id = asked[0].task.id
            pending = json_format.MessageToDict(paused.message.parts[1].data)["pending"]
            (call,) = pending
            answer = decisions(
                {"tool_call_id": call["tool_call_id"], "confirmed": True},
                task_id=task_id,
                context_id=asked[0].task.context_id,
            )
            done = await collect(c.client.send_message(answer))
            return asked, done, await c.client.get_task(GetTaskRequest(id=task_id))
        finally:
            await c.close()

    asked, done, final = run(scenario())
    paused = folded(asked).status
    assert paused.state == TaskState.TASK_STATE_INPUT_REQUIRED
    (call,) = json_format.MessageToDict(paused.message.parts[1].data)["pending"]
    assert call["name"] == "delete_file" and call["arguments"] == {"path": path}
    assert "decisions" in paused.message.parts[0].text  # it says what to send
    assert folded(done).status.state == TaskState.TASK_STATE_COMPLETED
    assert final.status.state == TaskState.TASK_STATE_COMPLETED
    assert texts(final) == {"text-0": "Deleting.", "text-1": "Done, it is gone."}
    assert counter_of(rdb, key_prefix)(f"delete_file:{path}") == 1


def test_a_rejection_with_a_note_reaches_the_model_and_a_message_without_decisions_is_refused(
    api: ApiServer, script: Any, rdb: redis.Redis, key_prefix: str, fake_openai: Any
) -> None:
    path = f"/tmp/{uuid.uuid4().hex}"
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": path})]), "Understood, I kept it.")

    async def scenario() -> Task:
        c = await connect(api.url, streaming=False)
        try:
            (asked,) = await collect(c.client.send_message(ask("delete it")))
            task = asked.task
            with pytest.raises(InvalidParamsError) as refused:  # text only: which calls to decide is the question
                await collect(c.client.send_message(ask("yes please", task_id=task.id, context_id=task.context_id)))
            assert "decisions" in str(refused.value)
            cid = json_format.MessageToDict(task.status.message.parts[1].data)["pending"][0]["tool_call_id"]
            note = {"tool_call_id": cid, "confirmed": False, "confirmation_note": "keep that file"}
            (done,) = await collect(c.client.send_message(decisions(note, task_id=task.id, context_id=task.context_id)))
            return done.task
        finally:
            await c.close()

    done = run(scenario())
    assert done.status.state == TaskState.TASK_STATE_COMPLETED and texts(done) == {"text-0": "Understood, I kept it."}
    told = [m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "tool"]
    assert any("keep that file" in t for t in told), told
    assert counter_of(rdb, key_prefix)(f"delete_file:{path}") == 0


# -- ListTasks; A2A 0.3's method names ------------------------------------------------------------------------------


def test_list_tasks_filters_by_context_and_state_and_pages(api: ApiServer, script: Any) -> None:
    context = uuid.uuid4().hex

    async def scenario() -> tuple[list[list[Task]], list[Task], list[Task]]:
        c = await connect(api.url, streaming=False)
        try:
            for n in range(3):
                script(f"Answer {n}.")
                await collect(c.client.send_message(ask(f"q{n}", context_id=context)))
            pages, token = [], ""
            while True:
                page = await c.client.list_tasks(ListTasksRequest(context_id=context, page_size=2, page_token=token))
                pages.append(list(page.tasks))
                token = page.next_page_token
                if not token:
                    break
            done = await c.client.list_tasks(
                ListTasksRequest(context_id=context, status=TaskState.TASK_STATE_COMPLETED, include_artifacts=True)
            )
            paused = await c.client.list_tasks(
                ListTasksRequest(context_id=context, status=TaskState.TASK_STATE_INPUT_REQUIRED)
            )
            return pages, list(done.tasks), list(paused.tasks)
        finally:
            await c.close()

    pages, done, paused = run(scenario())
    assert [len(p) for p in pages] == [2, 1]
    listed = [t for p in pages for t in p]
    assert all(t.context_id == context and not t.artifacts for t in listed)  # no artifacts unless asked
    assert [texts(t) for t in done] == [{"text-0": f"Answer {n}."} for n in (2, 1, 0)]  # newest first
    assert [t.id for t in done] == [t.id for t in listed] and paused == []


async def legacy_client(base: str, agent: str = "fake") -> Connected:
    """The SDK's 0.3 JSON-RPC transport (``CompatJsonRpcTransport``): what it picks for a card whose interface
    says 0.3; it sends 0.3's method names and shapes with ``A2A-Version: 0.3``."""
    http = httpx.AsyncClient(timeout=60)
    card = json_format.ParseDict(
        (await http.get(f"{base}/a2a/{agent}/.well-known/agent-card.json")).json(), AgentCard()
    )
    card.supported_interfaces[0].protocol_version = "0.3"
    client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
    assert type(client._transport).__name__ == "CompatJsonRpcTransport"  # the SDK chose its 0.3 transport
    return Connected(client, http)


def test_a_0_3_client_streams_gets_and_cancels_by_0_3_names(
    api: ApiServer, script: Any, rdb: redis.Redis, key_prefix: str
) -> None:
    script(ScriptedTurn("Adding.", [ScriptedToolCall("add", {"a": 2, "b": 3})]), "It is 5.")
    before = counter_of(rdb, key_prefix)("add")

    async def scenario() -> tuple[list[StreamResponse], Task]:
        c = await legacy_client(api.url)
        try:
            events = await collect(c.client.send_message(ask("2+3?")))  # message/stream
            return events, await c.client.get_task(GetTaskRequest(id=events[0].task.id))  # tasks/get
        finally:
            await c.close()

    events, got = run(scenario())
    task = folded(events)
    assert task.status.state == got.status.state == TaskState.TASK_STATE_COMPLETED
    assert texts(task) == texts(got) == {"text-0": "Adding.", "text-1": "It is 5."}
    assert counter_of(rdb, key_prefix)("add") - before == 1
    script(" ".join(f"w{i}" for i in range(400)), token_delay=0.02)

    async def canceled() -> Task:
        c = await legacy_client(api.url)
        try:
            async for ev in c.client.send_message(ask("talk")):
                if ev.HasField("artifact_update"):
                    return await c.client.cancel_task(CancelTaskRequest(id=ev.artifact_update.task_id))  # tasks/cancel
            raise AssertionError("no answer came")
        finally:
            await c.close()

    assert run(canceled()).status.state == TaskState.TASK_STATE_CANCELED


def test_0_3_names_need_an_empty_or_0_3_version_header(api: ApiServer, script: Any) -> None:
    script("Old school.")
    message = {
        "kind": "message",
        "messageId": uuid.uuid4().hex,
        "role": "user",
        "parts": [{"kind": "text", "text": "hi"}],
    }
    body = {"jsonrpc": "2.0", "id": 3, "method": "message/send", "params": {"message": message}}
    answer = httpx.post(f"{api.url}/a2a/fake", json=body, timeout=60).json()  # no A2A-Version: 0.3, as the spec says
    task = answer["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "completed", answer
    assert task["artifacts"] == [{"artifactId": "text-0", "parts": [{"kind": "text", "text": "Old school."}]}]
    assert {m["role"] for m in task["history"]} == {"user", "agent"}
    current = httpx.post(f"{api.url}/a2a/fake", json=body, headers={"A2A-Version": "1.0"}).json()
    assert current["error"]["code"] == -32601  # a 1.0 client gets 1.0's names only


# -- the SDK's defaults: its httpx client gives up on a read after 5 s -------------------------------------------


@pytest.fixture(scope="module", params=["flask", "django"])
def default_api(request: pytest.FixtureRequest, worker: Any, worker_env: dict[str, str]) -> Iterator[ApiServer]:
    """An API with its default keep-alive (15 s), longer than the SDK's default read timeout."""
    env = {k: v for k, v in worker_env.items() if k != "AGENTS_CELERY_KEEPALIVE_SECONDS"}
    server = ApiServer(env, django=request.param == "django").wait_ready()
    yield server
    server.stop()


@pytest.mark.slow
def test_the_sdk_with_its_defaults_waits_out_a_silent_model(default_api: ApiServer, script: Any) -> None:
    """The model says nothing for 6 s: the stream's keep-alives, and the spaces before a blocking answer, come
    often enough for the SDK's own httpx client (5 s timeouts), created by ``create_client`` itself."""

    async def scenario(streaming: bool) -> Task:
        client = await create_client(f"{default_api.url}/a2a/fake", ClientConfig(streaming=streaming))
        try:
            return folded(await collect(client.send_message(ask("wait for it"))))
        finally:
            await client.close()

    for streaming in (True, False):
        script("Finally.", token_delay=6.0)
        task = run(scenario(streaming))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED and texts(task) == {"text-0": "Finally."}
