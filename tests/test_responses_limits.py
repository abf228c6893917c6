"""Every text of a ``/v1`` body is held to the documented limits (issue #38, point 7; docs/responses.md, "Limits"):
each text at most ``AGENTS_CELERY_MAX_MESSAGE_CHARS``, ``metadata`` within OpenAI's limits, and the body besides the
new message's images and files at most ``AGENTS_CELERY_MAX_BODY_BYTES``. Refused in OpenAI's error shape with
``param``, read with the official ``openai`` SDK, and nothing is created. A live Flask API in a thread with small
limits, the session's real worker, real Redis, the fake OpenAI server as the agent's model."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agents_celery import Runtime

from .test_responses import Server

pytestmark = pytest.mark.timeout(90)

CHARS, BODY = 1_000, 8_192


@pytest.fixture
def small(fast_settings: Any, worker: Any) -> Iterator[Server]:
    runtime = Runtime(settings=fast_settings.model_copy(update={"max_message_chars": CHARS, "max_body_bytes": BODY}))
    found = Server(runtime)
    yield found
    found.close()


@pytest.fixture
def client(small: Server) -> openai.OpenAI:
    return small.client()


def newest(small: Server) -> str | None:
    """The newest run (a refused create made none)."""
    runs = small.runtime.runs(limit=1).runs
    return runs[0].run_id if runs else None


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


LONG = "x" * (CHARS + 1)
CALL = "call_" + "0" * 32 + "_c1"  # a call id of ours, of a run that does not exist

ASSISTANT_PARTS = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": LONG}]}
CALL_ITEM = {"type": "function_call", "call_id": CALL, "name": "f", "arguments": LONG}
REJECTION = {"type": "mcp_approval_response", "approval_request_id": "mcpr_x", "approve": False, "reason": LONG}

TOO_LONG = [
    ("instructions", {"input": "hi", "instructions": LONG}),
    ("input", {"input": LONG}),
    ("input[0].content", {"input": [{"role": "developer", "content": LONG}, user("hi")]}),
    ("input[1].content", {"input": [user("hi"), {"role": "assistant", "content": LONG}, user("again")]}),
    ("input[1].content", {"input": [user("hi"), ASSISTANT_PARTS, user("again")]}),
    ("input[0].content", {"input": [{"role": "user", "content": [{"type": "input_text", "text": LONG}]}]}),
    ("input[0].output", {"input": [{"type": "function_call_output", "call_id": CALL, "output": LONG}]}),
    ("input[0].arguments", {"input": [CALL_ITEM, user("x")]}),
    ("input[0].reason", {"input": [REJECTION]}),
]


@pytest.mark.parametrize(("param", "body"), TOO_LONG, ids=[f"{p}-{i}" for i, (p, _) in enumerate(TOO_LONG)])
def test_every_text_is_held_to_the_message_limit(
    small: Server, client: openai.OpenAI, fake_openai: Any, param: str, body: dict[str, Any]
) -> None:
    before, asked = newest(small), len(fake_openai.requests)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="fake", **body)
    assert refused.value.status_code == 400 and refused.value.param == param
    assert refused.value.code == "string_above_max_length" and f"at most {CHARS}" in refused.value.message
    assert newest(small) == before and len(fake_openai.requests) == asked  # nothing created, nothing asked


def test_metadata_is_held_to_openai_s_limits(small: Server, client: openai.OpenAI) -> None:
    before = newest(small)
    for metadata in ({f"k{i}": "v" for i in range(17)}, {"k": "v" * 513}, {"k" * 65: "v"}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="fake", input="hi", metadata=metadata)
        assert refused.value.param == "metadata"
    assert newest(small) == before


def test_the_body_besides_images_is_held_to_the_body_limit(
    small: Server, client: openai.OpenAI, script: Any, fake_openai: Any
) -> None:
    """Today the body of a create may be as large as the run's images and files in base64 (27.7 MB by default),
    whatever it holds; now only the new message's inline data has that room."""
    before, asked = newest(small), len(fake_openai.requests)
    history = [user("y" * 900) if i % 2 == 0 else {"role": "assistant", "content": "z" * 900} for i in range(10)]
    with pytest.raises(openai.APIStatusError) as refused:  # each text under its limit, together over the body's
        client.responses.create(model="fake", input=[*history, user("and now?")])  # type: ignore[arg-type]
    assert refused.value.status_code == 413 and refused.value.code == "payload_too_large"
    assert refused.value.param == "input" and f"at most {BODY}" in refused.value.message
    assert newest(small) == before and len(fake_openai.requests) == asked
    script("A small png.")
    image = "data:image/png;base64," + base64.b64encode(b"\x89PNG" + b"x" * 40_000).decode()  # 5x the body limit
    content = [{"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": image}]
    made = client.responses.create(model="fake", input=[{"role": "user", "content": content}])  # type: ignore[list-item]
    assert made.output_text == "A small png."


def test_conversation_items_are_held_to_the_message_limit(small: Server, client: openai.OpenAI) -> None:
    conversation = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as refused:
        client.conversations.items.create(conversation.id, items=[user("fine"), {"role": "assistant", "content": LONG}])  # type: ignore[list-item]
    assert refused.value.param == "items[1].content" and refused.value.code == "string_above_max_length"
    assert client.conversations.items.list(conversation.id).data == []  # nothing added


def test_the_texts_of_a_create_are_stored_once(small: Server, client: openai.OpenAI, script: Any) -> None:
    """The instructions and the earlier messages are the model's context; the response's record names their place
    there instead of holding them a second time (both are rewritten with every checkpoint)."""
    script("Noted.")
    history = [
        {"role": "developer", "content": "DEV-TEXT be brief"},
        user("USER-ONE"),
        {"role": "assistant", "content": "ASSISTANT-TWO"},
        user("the new message"),
    ]
    made = client.responses.create(model="fake", input=history, instructions="INSTRUCTIONS-TEXT")  # type: ignore[arg-type]
    assert made.output_text == "Noted." and made.instructions == "INSTRUCTIONS-TEXT"
    state, _ = small.runtime.store.load(newest(small) or "")
    stored = json.dumps(state.client)
    for text in ("DEV-TEXT be brief", "USER-ONE", "ASSISTANT-TWO", "INSTRUCTIONS-TEXT"):
        assert stored.count(text) == 1, (text, stored)
    shown = client.responses.input_items.list(made.id, order="asc").data
    assert [(i.role, i.content[0].text) for i in shown] == [  # type: ignore[union-attr]
        ("developer", "DEV-TEXT be brief"),
        ("user", "USER-ONE"),
        ("assistant", "ASSISTANT-TWO"),
        ("user", "the new message"),
    ]
    assert client.responses.retrieve(made.id).instructions == "INSTRUCTIONS-TEXT"
