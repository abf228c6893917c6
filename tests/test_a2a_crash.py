"""An A2A task survives its worker: the client's stream is dropped and the worker killed -9 in the middle of the
answer, then ``subscribe(task_id)`` (a2a-sdk 1.3's client) gets the Task first and every later update to
COMPLETED; the task it builds with the SDK's own artifact merge equals a clean run's, and the tool ran once.

And the A2A column of tests/test_matrix.py: each agent kind (ours, pydantic-ai) streamed through the SDK, clean and
with the worker killed -9 at the first piece of the answer while the client keeps reading: the same artifacts, each
tool once.

One private deployment for the module (its workers are the ones killed), a Flask and a Django API in front."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis
from a2a.types import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError

from agents_celery.a2a.task import TaskFold
from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder

from .conftest import TEST_REDIS_URL, all_events, wait_for
from .support.apis import ApiServer
from .support.invariants import assert_run_sound, counter_of
from .support.workers import Deployment
from .test_a2a import ask, collect, connect, folded, legacy_client, run, texts
from .test_matrix import ANSWER, KIND_AGENTS, KINDS, answering, kill_and_replace

pytestmark = [pytest.mark.timeout(150), pytest.mark.slow]


@pytest.fixture(scope="module")
def crash(fake_openai: Any) -> Iterator[tuple[Deployment, dict[str, ApiServer]]]:
    agents = {"AGENTS_CELERY_AGENTS": KIND_AGENTS}
    receivers = {"AGENTS_CELERY_WEBHOOK_ALLOW": "127.0.0.1", "AGENTS_CELERY_WEBHOOK_BACKOFF_SECONDS": "0.2"}
    dep = Deployment("a2a", fake_openai.url, {**agents, **receivers})
    servers: dict[str, ApiServer] = {}
    try:
        dep.start(1)
        env = {**dep.env, "AGENTS_CELERY_KEEPALIVE_SECONDS": "0.3"}
        servers = {"flask": ApiServer(env).wait_ready(), "django": ApiServer(env, django=True).wait_ready()}
        yield dep, servers
    finally:
        for server in servers.values():
            server.stop()
        dep.close()


def script(fake_openai: Any, token_delay: float = 0.02) -> None:
    first = ScriptedTurn("Looking.", [ScriptedToolCall("add", {"a": 2, "b": 3})])
    fake_openai.responder = ScriptResponder([first, ANSWER], token_delay=token_delay)


@pytest.mark.parametrize("front", ["flask", "django"])
def test_subscribe_after_a_kill_9_mid_answer_loses_and_repeats_nothing(
    crash: tuple[Deployment, dict[str, ApiServer]], fake_openai: Any, front: str
) -> None:
    dep, servers = crash
    base = servers[front].url
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        count = counter_of(r, dep.prefix)
        before = count("add")

        async def clean() -> dict[str, str]:
            c = await connect(base)
            try:
                return texts(folded(await collect(c.client.send_message(ask("Go.", context_id=uuid.uuid4().hex)))))
            finally:
                await c.close()

        script(fake_openai)
        reference = run(clean())
        assert reference == {"text-0": "Looking.", "text-1": ANSWER}
        assert count("add") - before == 1
        script(fake_openai, token_delay=0.1)  # the retried answer takes 4 s: the subscription comes before its end
        calls = fake_openai.calls

        async def killed_then_subscribed() -> tuple[str, list[StreamResponse]]:
            c = await connect(base)
            try:
                task_id = ""
                async for ev in c.client.send_message(ask("Go.")):
                    task_id = task_id or ev.task.id
                    update = ev.artifact_update
                    if ev.HasField("artifact_update") and update.artifact.artifact_id == "text-1":
                        break  # the first piece of the answer: drop the stream here
            finally:
                await c.close()
            kill_and_replace(dep)  # the worker answering dies, a fresh one takes over
            again = await connect(base)
            try:
                return task_id, await collect(again.client.subscribe(SubscribeToTaskRequest(id=task_id)))
            finally:
                await again.close()

        task_id, events = run(killed_then_subscribed())
        assert events[0].HasField("task") and events[0].task.id == task_id  # the Task first
        assert events[0].task.status.state == TaskState.TASK_STATE_WORKING
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED  # then the rest, to the end
        assert texts(folded(events)) == reference  # nothing lost, nothing twice
        assert count("add") - before == 2  # once per task: the crashed one's tool ran before the kill, not again
    assert fake_openai.calls - calls == 3  # the killed model turn once more
    log = all_events(dep.runtime, task_id)
    assert_run_sound(log)
    assert [e.data.get("name") for e in log if e.type.value == "CUSTOM"].count("attempt_abandoned") == 1


@pytest.mark.parametrize("killing", [pytest.param(False, id="clean"), pytest.param(True, id="kill-9")])
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_matrix_column_the_same_answer_and_each_tool_once(
    crash: tuple[Deployment, dict[str, ApiServer]], fake_openai: Any, kind: str, killing: bool
) -> None:
    dep, servers = crash
    spec = KINDS[kind]
    first = ScriptedTurn("Looking.", [ScriptedToolCall(spec.tool, spec.args)])
    fake_openai.responder = ScriptResponder([first, ANSWER], token_delay=0.02 if killing else 0.0)
    kills: list[int] = []
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        count = counter_of(r, dep.prefix)
        before, calls = count(spec.counter), fake_openai.calls

        async def read() -> list[StreamResponse]:
            c = await connect(servers["flask"].url, spec.agent)
            try:
                events = []
                async for ev in c.client.send_message(ask("Go.")):
                    events.append(ev)
                    parts = ev.artifact_update.artifact.parts if ev.HasField("artifact_update") else []
                    if killing and not kills and parts and answering(parts[0].text):
                        kills.append(1)
                        kill_and_replace(dep)  # the client keeps reading the same stream
                return events
            finally:
                await c.close()

        events = run(read())
        task = folded(events)
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert list(texts(task).values()) == ["Looking.", ANSWER]  # nothing partial, nothing twice
        assert count(spec.counter) - before == 1  # the tool ran once, killed or not
    assert len(kills) == int(killing)
    assert fake_openai.calls - calls == 2 + int(killing)  # the killed model turn once more
    log = all_events(dep.runtime, task.id)
    assert_run_sound(log)
    abandoned = [e for e in log if e.type.value == "CUSTOM" and e.data.get("name") == "attempt_abandoned"]
    assert len(abandoned) == int(killing)


# -- push notifications, to a receiver that fails its first delivery ------------------------------------------------


class Receiver:
    """An HTTP receiver on 127.0.0.1 that answers 500 to its first ``fail`` POSTs, then 200; it keeps every POST."""

    def __init__(self, fail: int = 1) -> None:
        self.posts: list[tuple[int, dict[str, str], dict[str, Any]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status = 500 if len(receiver.posts) < fail else 200
                receiver.posts.append((status, dict(self.headers), body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def taken(self) -> list[dict[str, Any]]:
        return [body for status, _, body in self.posts if status == 200]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_push_gets_every_status_in_order_with_its_token_after_a_failed_delivery(
    crash: tuple[Deployment, dict[str, ApiServer]], fake_openai: Any, receiver: Receiver
) -> None:
    dep, servers = crash
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("Adding.", [ScriptedToolCall("add", {"a": 2, "b": 3})]), "5."]
    )

    async def scenario() -> tuple[list[StreamResponse], list[Any], list[Any]]:
        c = await connect(servers["flask"].url)
        try:
            request = ask("Go.")
            config = TaskPushNotificationConfig(url=receiver.url, token="s3cret")
            request.configuration.task_push_notification_config.CopyFrom(config)
            events = await collect(c.client.send_message(request))
            task_id = events[0].task.id
            listed = await c.client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            (one,) = listed.configs
            got = await c.client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id=one.id)
            )
            assert got.url == receiver.url and got.token == "s3cret"
            with pytest.raises(InvalidParamsError):  # the SSRF guard: an address inside the network
                await c.client.create_task_push_notification_config(
                    TaskPushNotificationConfig(task_id=task_id, url="http://10.1.2.3/hook")
                )
            wait_for(lambda: any(_state(b) == "TASK_STATE_COMPLETED" for b in receiver.taken()), timeout=30)
            await c.client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=one.id)
            )
            after = await c.client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            return events, list(listed.configs), list(after.configs)
        finally:
            await c.close()

    events, listed, after = run(scenario())
    streamed = [TaskState.Name(e.status_update.status.state) for e in events if e.HasField("status_update")]
    delivered = [_state(b) for b in receiver.taken()]
    fold = TaskFold(events[0].task.id, events[0].task.context_id)
    results = [r for ev in all_events(dep.runtime, fold.run_id) for r in fold.feed(ev)]
    logged = [r["statusUpdate"]["status"]["state"] for r in results if "statusUpdate" in r]
    assert delivered == logged  # every status change, in order, none lost, none twice
    assert delivered[len(delivered) - len(streamed) :] == streamed  # what the stream showed after its Task, the same
    assert delivered[0] == "TASK_STATE_WORKING" and delivered[-1] == "TASK_STATE_COMPLETED"
    assert receiver.posts[0][0] == 500 and len(receiver.posts) == len(delivered) + 1  # the first was tried again
    assert {headers["X-A2A-Notification-Token"] for _, headers, _ in receiver.posts} == {"s3cret"}
    assert all(b["statusUpdate"]["taskId"] == events[0].task.id for b in receiver.taken())
    assert len(listed) == 1 and after == []


def _state(body: dict[str, Any]) -> str:
    return str(body["statusUpdate"]["status"]["state"])


def test_a_0_3_client_sets_reads_and_deletes_push_configs(
    crash: tuple[Deployment, dict[str, ApiServer]], fake_openai: Any, receiver: Receiver
) -> None:
    _dep, servers = crash
    fake_openai.responder = ScriptResponder(["Old school push."])

    async def scenario() -> tuple[str, list[Any], Any, list[Any]]:
        c = await legacy_client(servers["flask"].url)
        try:
            request = ask("Go.")
            config = TaskPushNotificationConfig(url=receiver.url, token="t0k", id="first")
            request.configuration.task_push_notification_config.CopyFrom(config)
            (done,) = [e async for e in c.client.send_message(request) if e.HasField("task")][:1]  # message/stream
            task_id = done.task.id
            more = TaskPushNotificationConfig(task_id=task_id, url=receiver.url, token="t0k", id="second")
            await c.client.create_task_push_notification_config(more)  # tasks/pushNotificationConfig/set
            listed = await c.client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            got = await c.client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="second")
            )
            await c.client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="first")
            )
            after = await c.client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            return task_id, list(listed.configs), got, list(after.configs)
        finally:
            await c.close()

    task_id, listed, got, after = run(scenario())
    assert sorted(c.id for c in listed) == ["first", "second"] and {c.task_id for c in listed} == {task_id}
    assert got.url == receiver.url and got.token == "t0k"
    assert [c.id for c in after] == ["second"]
    wait_for(lambda: any(_state(b) == "TASK_STATE_COMPLETED" for b in receiver.taken()), timeout=30)
    assert {headers["X-A2A-Notification-Token"] for _, headers, _ in receiver.posts} == {"t0k"}
