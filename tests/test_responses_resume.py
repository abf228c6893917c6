"""A ``starting_after`` resume deep in a long response starts from a checkpoint of the renderer's fold
(agents_celery/storage/renders.py), not from the response's start: the live Responses API with the official
``openai`` SDK (tests/test_responses.py's server), the session's worker, real Redis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agents_celery import Runtime
from agents_celery.http.responses.presenter import CHECKPOINT_EVERY, CHECKPOINTS_KEPT
from agents_celery.storage.keys import Keys

from .test_responses import Server, events_of

pytestmark = pytest.mark.timeout(90)

#: Words the model streams: a response of about 250 sequence numbers, so a stream saves three checkpoints.
WORDS = 240


@pytest.fixture
def server(fast_settings: Any, worker: Any) -> Iterator[Server]:
    found = Server(Runtime(settings=fast_settings))
    yield found
    found.close()


def test_a_resume_starts_from_the_latest_checkpoint_before_it(
    server: Server, script: Any, r: Any, fast_settings: Any
) -> None:
    """The live stream saves the fold every CHECKPOINT_EVERY sequence numbers (the last CHECKPOINTS_KEPT kept, the key
    expiring with the run); a resume from any point gives exactly the live stream's tail; one after a checkpoint
    starts from it (a checkpoint whose text was altered shows it), and one whose event the log no longer holds
    (Redis lost writes) is ignored."""
    client: openai.OpenAI = server.client()
    script(" ".join(f"w{i}" for i in range(WORDS)))
    live = events_of(client.responses.create(model="fake", input="long", stream=True, background=True))
    response_id, last = live[0].response.id, live[-1].sequence_number
    run_id = response_id.removeprefix("resp_").rpartition("_")[0]
    renders = Keys(fast_settings.key_prefix).run(run_id).renders
    saved = sorted(int(f.decode().rsplit(":", 1)[1]) for f in r.hkeys(renders))
    assert len(saved) == min(CHECKPOINTS_KEPT, last // CHECKPOINT_EVERY) and saved[-1] >= last - CHECKPOINT_EVERY
    run_ttl, ttl = r.pttl(Keys(fast_settings.key_prefix).run(run_id).run), r.pttl(renders)
    assert 0 < ttl <= max(run_ttl, fast_settings.retention_ms)

    def tail(n: int) -> list[dict[str, Any]]:
        return [
            e.model_dump() for e in events_of(client.responses.retrieve(response_id, stream=True, starting_after=n))
        ]

    for n in (0, saved[0] - 1, saved[0], saved[0] + 1, saved[-1] + 3, last - 1):
        assert tail(n) == [e.model_dump() for e in live[n + 1 :]], n

    field = next(f for f in r.hkeys(renders) if f.decode().endswith(f":{saved[-1]}"))
    checkpoint = json.loads(r.hget(renders, field))
    checkpoint["state"]["output"][0]["content"][0]["text"] = "ALTERED "
    r.hset(renders, field, json.dumps(checkpoint))
    final = tail(saved[-1] + 3)[-1]["response"]["output"][0]["content"][0]["text"]
    assert final.startswith("ALTERED ") and final != live[-1].response.output[0].content[0].text  # type: ignore[union-attr]
    offset, _, tag = checkpoint["position"].partition(".")
    checkpoint["position"] = f"{offset}.{'0' * len(tag)}"  # the log holds another event there now
    r.hset(renders, field, json.dumps(checkpoint))
    assert tail(saved[-1] + 3) == [e.model_dump() for e in live[saved[-1] + 4 :]]
