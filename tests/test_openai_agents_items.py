"""The Agents SDK guest's plain parts, without Redis or workers: the SDK's items read as chat messages and as
conversation items, a session's history given as items, the model's Responses stream events as our events, a model
unit's identity (never its instructions), and the SDK's own items made back from stored ones."""

from __future__ import annotations

from typing import Any

from agents import Agent, function_tool
from openai.types.responses import (
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionToolCall,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
)

from agents_celery.contrib.openai_agents.events import ResponseStream
from agents_celery.contrib.openai_agents.items import chat_items, sdk_content, split_messages
from agents_celery.contrib.openai_agents.results import Graph, run_items
from agents_celery.contrib.openai_agents.segment import JournaledModel
from agents_celery.conversation import as_chat, user_messages
from agents_celery.http.responses.items import items_of

ITEMS: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": "Weather?"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
    {"type": "function_call", "call_id": "c1", "name": "get", "arguments": '{"x": 1}'},
    {"type": "function_call", "call_id": "c2", "name": "put", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "got"},
    {"type": "function_call_output", "call_id": "c2", "output": "put"},
    {"type": "reasoning", "id": "r1", "summary": []},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
]


def test_the_sdk_s_items_read_as_chat_messages() -> None:
    chat = as_chat(ITEMS)
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool", "assistant"]
    assert chat[1]["content"] == "Looking." and [c["id"] for c in chat[1]["tool_calls"]] == ["c1", "c2"]
    assert chat[2] == {"role": "tool", "tool_call_id": "c1", "content": "got"}
    assert user_messages(ITEMS) == [{"role": "user", "content": "Weather?"}]
    shown = [item for message in ITEMS for item in items_of(message)]
    assert [i["type"] for i in shown] == [
        "message",
        "message",
        *["function_call"] * 2,
        *["function_call_output"] * 2,
        "message",
    ]


def test_a_session_of_chat_messages_is_given_as_items_and_the_new_message_taken() -> None:
    history = [
        {"role": "system", "content": "You are ours."},
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "t1", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "done"},
        {"role": "assistant", "content": "Hello."},
    ]
    split = split_messages([*history, {"role": "user", "content": "Again"}], history_len=len(history))
    assert [i["type"] for i in split.history] == ["message", "function_call", "function_call_output", "message"]
    assert split.history[0] == {"type": "message", "role": "user", "content": "Hi"}  # no system message: the agent's
    assert split.kept == history and split.own == []
    assert split.new == [{"type": "message", "role": "user", "content": "Again"}]
    assert chat_items(as_chat(ITEMS))[2]["call_id"] == "c1"


def test_a_message_s_parts_are_given_as_responses_parts() -> None:
    parts = [
        {"type": "text", "text": "What?"},
        {"type": "image_url", "ref": "run/0", "media_type": "image/png", "bytes": 3},
        {"type": "file", "file": {"file_id": "file-1"}},
    ]
    stored = {"run/0": {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA", "detail": "low"}}}
    assert sdk_content(parts, stored) == [
        {"type": "input_text", "text": "What?"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAA", "detail": "low"},
        {"type": "input_file", "file_id": "file-1"},
    ]


def _added(item: Any, index: int) -> ResponseOutputItemAddedEvent:
    return ResponseOutputItemAddedEvent(
        type="response.output_item.added", item=item, output_index=index, sequence_number=0
    )


def test_the_model_s_stream_events_become_ours() -> None:
    stream = ResponseStream()
    message = ResponseOutputMessage(id="m", type="message", role="assistant", status="in_progress", content=[])
    call = ResponseFunctionToolCall(type="function_call", call_id="c9", name="get", arguments='{"a": 1}')
    fed = [
        _added(message, 0),
        ResponseTextDeltaEvent(
            type="response.output_text.delta", item_id="m", output_index=0, content_index=0, delta="Hi",
            logprobs=[], sequence_number=2,
        ),
        ResponseOutputItemDoneEvent(type="response.output_item.done", item=message, output_index=0, sequence_number=3),
        ResponseOutputItemDoneEvent(type="response.output_item.done", item=call, output_index=1, sequence_number=4),
    ]  # fmt: skip
    kinds = [e.type.value for ev in fed for e in stream.feed(ev)]
    assert kinds == [
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",  # a call announced only when done: whole
    ]  # fmt: skip
    args = ResponseFunctionCallArgumentsDeltaEvent(
        type="response.function_call_arguments.delta", item_id="c", output_index=2, delta="{}", sequence_number=5
    )
    stream.feed(
        ResponseOutputItemAddedEvent(type="response.output_item.added", item=call, output_index=2, sequence_number=5)
    )
    assert [e.type.value for e in stream.feed(args)] == ["TOOL_CALL_ARGS"]
    assert [e.type.value for e in stream.close()] == ["TOOL_CALL_END"]  # what a cut stream left open


@function_tool
def get(x: int) -> str:
    """Get."""
    return str(x)


def test_a_model_unit_is_its_agent_model_and_tools_never_its_instructions() -> None:
    model: Any = JournaledModel.__new__(JournaledModel)
    first = Agent(name="a", instructions="It is 10:00.", model="gpt-4o-mini", tools=[get])
    later = first.clone(instructions="It is 10:01.")
    inner: Any = type("Inner", (), {"model": "gpt-4o-mini"})()
    assert model._unit(first, inner, [get], []) == model._unit(later, inner, [get], [])
    assert model._unit(first, inner, [get], []) != model._unit(first, inner, [], [])
    other: Any = type("Inner", (), {"model": "gpt-4o"})()
    assert model._unit(first, inner, [get], [])[1] != model._unit(first, other, [get], [])[1]


def test_stored_items_are_the_sdk_s_own_items_again() -> None:
    billing = Agent(name="Billing agent", instructions="Refund.")
    triage = Agent(name="triage", instructions="Route.", handoffs=[billing])
    items = [
        {"type": "function_call", "call_id": "h", "name": "transfer_to_billing_agent", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "h", "output": '{"assistant": "Billing agent"}'},
        {"type": "message", "role": "assistant", "content": "Refunded."},
    ]
    made = run_items(Graph(triage), items)
    assert [type(i).__name__ for i in made] == ["HandoffCallItem", "HandoffOutputItem", "MessageOutputItem"]
    assert made[1].target_agent is billing and made[2].agent is billing  # type: ignore[attr-defined]
    text = made[2].raw_item.content[0]  # type: ignore[union-attr]
    assert isinstance(text, ResponseOutputText) and text.text == "Refunded."
