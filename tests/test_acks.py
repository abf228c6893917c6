"""StepRequest once its prefetch slot was freed early (the commit that acks its message was sent): what an ack
or a reject then does in kombu's unacked keys when that commit did not ack the message, on a real kombu Redis
channel and a real message, as the consumer would have received it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from celery import Celery
from vine import promise

from agents_celery.broker.celery_app import STEP_TASK, create_celery_app
from agents_celery.broker.extension import extension
from agents_celery.broker.fastpaths import StepRequest
from agents_celery.settings import load_settings

from .conftest import TEST_BROKER_URL, TEST_REDIS_URL

pytestmark = pytest.mark.timeout(30)


@dataclass
class Broker:
    app: Celery
    queue: str
    redis: redis.Redis
    channel: Any

    def receive(self) -> Any:
        """A step message sent to the queue and taken off it by the kombu channel (recorded as unacked)."""
        self.app.send_task(STEP_TASK, args=["run-1", 0], kwargs={"agent": "a"}, queue=self.queue)
        message = self.channel.basic_get(self.queue, no_ack=False)
        assert message is not None and self.redis.llen(self.queue) == 0
        assert self.redis.hexists("unacked", message.delivery_tag)
        self.channel.qos.prefetch_count = 1  # what the step queue's consumer runs with
        return message

    def unacked(self, message: Any) -> bool:
        tag = message.delivery_tag
        held = self.redis.hexists("unacked", tag)
        assert held == (self.redis.zscore("unacked_index", tag) is not None)  # kombu keeps both in step
        return bool(held)


@pytest.fixture
def broker(versions_seam: None) -> Iterator[Broker]:
    queue = f"acks-test-{uuid.uuid4().hex[:8]}"
    app = create_celery_app(load_settings(redis_url=TEST_REDIS_URL, broker_url=TEST_BROKER_URL, queue=queue), agents={})
    client = redis.Redis.from_url(TEST_BROKER_URL)
    conn = app.connection_for_write()
    b = Broker(app, queue, client, conn.default_channel)
    try:
        yield b
    finally:
        for tag in list(b.channel.qos._delivered):
            client.hdel("unacked", tag)
            client.zrem("unacked_index", tag)
        client.delete(queue, f"_kombu.binding.{queue}")
        client.close()
        conn.release()
        app.close()


def _request(app: Celery, message: Any) -> StepRequest:
    """The request as Celery's consumer builds it: ack and reject are promises over the message's methods."""
    run_now = promise(lambda fn, *args: fn(*args), (message.ack_log_error,))
    reject_now = promise(lambda fn, *args: fn(*args), (message.reject_log_error,))
    return extension(app).step_messages.request_class(
        message, on_ack=run_now, on_reject=reject_now, app=app, hostname="test", eventer=None,
        task=app.tasks[STEP_TASK], connection_errors=(), body=message.body, headers=message.headers,
        decoded=False, utc=True,
    )  # fmt: skip


def _settled_early(broker: Broker, message: Any) -> StepRequest:
    request = _request(broker.app, message)
    assert not broker.channel.qos.can_consume()
    commit_acks = extension(broker.app).step_messages.commit_acks
    commit_acks(message.delivery_tag, False)  # the step is about to send its commit
    assert request.settled_early and message.acknowledged  # kombu's side: acked,
    assert broker.channel.qos.can_consume()  # and the prefetch slot free for the next message
    assert broker.unacked(message)  # Redis's side is the commit's to clear
    return request


def test_a_reject_with_requeue_puts_the_message_back_when_the_commit_did_not_ack_it(broker: Broker) -> None:
    message = broker.receive()
    _settled_early(broker, message).reject(requeue=True)
    assert not broker.unacked(message)
    restored = broker.redis.lrange(broker.queue, 0, -1)
    assert len(restored) == 1 and json.loads(restored[0])["properties"]["delivery_tag"] == message.delivery_tag


@pytest.mark.parametrize("settle", ["acknowledge", "reject"])
def test_an_ack_or_a_reject_without_requeue_removes_it(broker: Broker, settle: str) -> None:
    message = broker.receive()
    getattr(_settled_early(broker, message), settle)()
    assert not broker.unacked(message) and broker.redis.llen(broker.queue) == 0


@pytest.mark.parametrize("settle", ["acknowledge", "reject"])
def test_once_the_commit_acked_it_neither_makes_a_round_trip(broker: Broker, settle: str) -> None:
    message = broker.receive()
    request = _settled_early(broker, message)
    extension(broker.app).step_messages.commit_acks(
        message.delivery_tag, True
    )  # the commit succeeded: in Redis it removed the message itself
    getattr(request, settle)()
    assert broker.unacked(message) and broker.redis.llen(broker.queue) == 0  # here nothing removed it


def test_each_app_keeps_its_own_step_messages(broker: Broker) -> None:
    message = broker.receive()
    request = _request(broker.app, message)
    settings = load_settings(redis_url=TEST_REDIS_URL, broker_url=TEST_BROKER_URL, queue=broker.queue)
    other = create_celery_app(settings, agents={})
    try:
        extension(other).step_messages.commit_acks(message.delivery_tag, False)  # not its message
        assert not request.settled_early and not message.acknowledged
        extension(broker.app).step_messages.commit_acks(message.delivery_tag, False)
        assert request.settled_early and message.acknowledged
    finally:
        other.close()
    request.acknowledge()  # its commit did not ack it: the request removes it
    assert not broker.unacked(message)
