"""StepPublisher: the message it LPUSHes is the one ``send_task`` would have sent; it steps aside when it must."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, signals

from agents_celery.broker.celery_app import STEP_TASK, create_celery_app
from agents_celery.broker.publisher import StepPublisher
from agents_celery.settings import Settings, load_settings

from .conftest import TEST_BROKER_URL, TEST_REDIS_URL

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def app_and_queue() -> Iterator[tuple[Celery, str, redis.Redis]]:
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
    publisher = StepPublisher(app, STEP_TASK, queue)
    try:
        assert publisher.direct_route() is not None, "a plain redis:// broker should take the direct path"
        app.send_task(STEP_TASK, args=["run-1", 3], kwargs={"agent": "assistant"}, queue=queue)
        expected = _pop(broker, queue)
        publisher.send("run-1", 3, "assistant")
        got = _pop(broker, queue)
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
    publisher = StepPublisher(app, STEP_TASK, queue)
    seen: list[Any] = []

    def receiver(sender: Any = None, headers: Any = None, **_: Any) -> None:
        seen.append(headers["id"])

    signals.before_task_publish.connect(receiver, weak=False)
    try:
        assert publisher.direct_route() is None
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
    publisher = StepPublisher(app, STEP_TASK, queue)
    assert publisher.direct_route() is None, why


def test_the_commit_may_ack_only_what_this_redis_delivers(app_and_queue: tuple[Celery, str, redis.Redis]) -> None:
    app, queue, _ = app_and_queue
    assert StepPublisher(app, STEP_TASK, queue).ack_keys(TEST_BROKER_URL) == ("unacked_index", "unacked")
    assert StepPublisher(app, STEP_TASK, queue).ack_keys("redis://127.0.0.1:6379/15") is None  # state elsewhere
    app.conf.broker_transport_options = {**app.conf.broker_transport_options, "global_keyprefix": "pre:"}
    assert StepPublisher(app, STEP_TASK, queue).ack_keys(TEST_BROKER_URL) == ("pre:unacked_index", "pre:unacked")
    app.conf.broker_read_url = "redis://127.0.0.1:6379/15"  # consumed from another Redis
    assert StepPublisher(app, STEP_TASK, queue).ack_keys(TEST_BROKER_URL) is None
    app.conf.broker_read_url = None
    app.conf.broker_transport_options = {**app.conf.broker_transport_options, "unacked_key": "mine"}
    assert StepPublisher(app, STEP_TASK, queue).ack_keys(TEST_BROKER_URL) is None  # kombu keys we do not know
