"""StepPublisher and its direct_publish fast path: the message it LPUSHes is the one ``send_task`` would have sent;
it steps aside when it must, and with fast paths off it is ``send_task``."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, signals

from agents_celery.broker.celery_app import create_celery_app
from agents_celery.broker.fastpaths import DirectPublisher, FastPaths
from agents_celery.broker.publisher import STEP_TASK, StepPublisher
from agents_celery.settings import Settings, load_settings
from agents_celery.storage.connections import _driver_info

from .conftest import TEST_BROKER_URL, TEST_REDIS_URL

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def app_and_queue(versions_seam: None) -> Iterator[tuple[Celery, str, redis.Redis]]:
    queue = f"publisher-test-{uuid.uuid4().hex[:8]}"
    settings: Settings = load_settings(redis_url=TEST_REDIS_URL, broker_url=TEST_BROKER_URL, queue=queue)
    app = create_celery_app(settings, agents={})
    broker = redis.Redis.from_url(TEST_BROKER_URL)
    yield app, queue, broker
    broker.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
    broker.close()
    app.close()


def _pop(broker: redis.Redis, queue: str) -> dict[str, Any]:
    raw = broker.rpop(queue)
    assert raw is not None, f"nothing was sent to {queue!r}"
    return json.loads(raw)  # type: ignore[no-any-return]


def _without_ids(message: dict[str, Any]) -> dict[str, Any]:
    headers = {k: v for k, v in message["headers"].items() if k not in ("id", "root_id")}
    props = {k: v for k, v in message["properties"].items() if k not in ("correlation_id", "delivery_tag")}
    body = json.loads(base64.b64decode(message["body"]))
    return {**message, "headers": headers, "properties": props, "body": body}


def test_the_message_is_the_one_send_task_sends(app_and_queue: tuple[Celery, str, redis.Redis]) -> None:
    app, queue, broker = app_and_queue
    publisher = StepPublisher(app, queue, FastPaths(True))
    try:
        assert publisher.direct is not None and publisher.direct.route(queue) is not None, "a plain redis:// broker"
        app.send_task(STEP_TASK, args=["run-1", 3], kwargs={"agent": "assistant"}, queue=queue)
        expected = _pop(broker, queue)
        publisher.send("run-1", 3, "assistant")
        got = _pop(broker, queue)
        kwargs = next(iter(publisher.direct._clients.values())).connection_pool.connection_kwargs
        assert kwargs.get("driver_info") is _driver_info()  # the process's one, none looked up per connection
    finally:
        publisher.close()
    assert _without_ids(got) == _without_ids(expected)
    assert got["body"] == expected["body"]  # the same bytes, not only the same values
    assert got["headers"]["id"] == got["headers"]["root_id"] == got["properties"]["correlation_id"]
    assert got["properties"]["delivery_tag"] != expected["properties"]["delivery_tag"]
    assert _without_ids(got)["body"][:2] == [["run-1", 3], {"agent": "assistant"}]


def test_a_publish_signal_receiver_gets_send_task(app_and_queue: tuple[Celery, str, redis.Redis]) -> None:
    """Tracing and other instrumentation hook Celery's publish signals: they keep working."""
    app, queue, broker = app_and_queue
    publisher = StepPublisher(app, queue, FastPaths(True))
    seen: list[Any] = []

    def receiver(sender: Any = None, headers: Any = None, **_: Any) -> None:
        seen.append(headers["id"])

    signals.before_task_publish.connect(receiver, weak=False)
    try:
        assert publisher.direct is not None and publisher.direct.route(queue) is None
        publisher.send("run-2", 0, "assistant")
    finally:
        signals.before_task_publish.disconnect(receiver)
        publisher.close()
    message = _pop(broker, queue)
    assert seen == [message["headers"]["id"]]


@pytest.mark.parametrize(
    ("conf", "why"),
    [
        ({"broker_url": "amqp://guest:guest@127.0.0.1:5672//"}, "RabbitMQ"),
        ({"broker_url": "redis://127.0.0.1:6379/10;redis://127.0.0.1:6380/10"}, "failover URLs"),
        ({"broker_use_ssl": {"ssl_cert_reqs": "required"}}, "TLS"),
        ({"task_send_sent_event": True}, "task-sent events"),
        ({"broker_transport_options": {"priority_steps": [0, 5]}}, "transport options it does not know"),
        ({"task_compression": "gzip"}, "compressed bodies"),
        ({"task_default_priority": 5}, "a priority queue"),
        ({"task_annotations": {"agents_celery.step": {"time_limit": 30}}}, "annotations that change headers"),
    ],
)
def test_other_setups_use_send_task(
    app_and_queue: tuple[Celery, str, redis.Redis], conf: dict[str, Any], why: str
) -> None:
    app, queue, _ = app_and_queue
    app.conf.update(conf)
    assert DirectPublisher(app, STEP_TASK).route(queue) is None, why


def test_the_commit_may_ack_only_what_this_redis_delivers(app_and_queue: tuple[Celery, str, redis.Redis]) -> None:
    app = app_and_queue[0]
    assert DirectPublisher(app, STEP_TASK).ack_keys(TEST_BROKER_URL) == ("unacked_index", "unacked")
    assert DirectPublisher(app, STEP_TASK).ack_keys("redis://127.0.0.1:6379/15") is None  # state elsewhere
    app.conf.broker_transport_options = {**app.conf.broker_transport_options, "global_keyprefix": "pre:"}
    assert DirectPublisher(app, STEP_TASK).ack_keys(TEST_BROKER_URL) == ("pre:unacked_index", "pre:unacked")
    app.conf.broker_read_url = "redis://127.0.0.1:6379/15"  # consumed from another Redis
    assert DirectPublisher(app, STEP_TASK).ack_keys(TEST_BROKER_URL) is None
    app.conf.broker_read_url = None
    app.conf.broker_transport_options = {**app.conf.broker_transport_options, "unacked_key": "mine"}
    assert DirectPublisher(app, STEP_TASK).ack_keys(TEST_BROKER_URL) is None  # kombu keys we do not know


def test_with_fast_paths_off_it_is_send_task(app_and_queue: tuple[Celery, str, redis.Redis]) -> None:
    app, queue, broker = app_and_queue
    off = FastPaths.decide(False)
    assert not off.enabled and off.describe() == "all off (AGENTS_CELERY_FAST_PATHS=0)"
    publisher = StepPublisher(app, queue, off)
    sent: list[str] = []

    def receiver(sender: Any = None, headers: Any = None, **_: Any) -> None:
        sent.append(headers["id"])

    signals.after_task_publish.connect(receiver, weak=False)
    try:
        assert publisher.direct is None
        publisher.send("run-3", 1, "assistant")
    finally:
        signals.after_task_publish.disconnect(receiver)
        publisher.close()
    message = _pop(broker, queue)
    assert sent == [message["headers"]["id"]]  # it went through send_task


def test_versions_outside_the_tested_ranges_turn_every_fast_path_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from agents_celery.broker import fastpaths

    assert FastPaths.decide(True).enabled  # the versions installed here are the tested ones
    monkeypatch.setitem(fastpaths.TESTED, "kombu", ("0.1", "0.1"))  # whatever is installed is newer
    decided = FastPaths.decide(True)
    assert not decided.enabled
    assert decided.describe().startswith("all off (untested versions: kombu ")
    assert decided.send_ahead is not fastpaths.Sent.make and decided.idle_check is not fastpaths.reconnect_if_closed
