"""Agent frameworks as clients of our ``/v1`` Responses API, with their defaults: pydantic-ai's
``OpenAIResponsesModel`` (it resends the whole history each request) and the OpenAI Agents SDK (``Runner.run`` with
the whole history, ``previous_response_id``, ``run_streamed``, ``OpenAIConversationsSession``, a ``HostedMCPTool``
taking the agent's approval requests). Each brings its own function tool; the model (the fake OpenAI server behind
our agent ``fake``) calls it twice per round, two rounds per turn, two turns: every call reaches the framework's
tool once, and the second turn is the next run of the same session (the model sees both user messages).

On Flask (the blueprint in a thread) and on the Django app (under uvicorn, one process for the module), against the
session's worker."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import openai
import pytest

from agents_celery import Runtime, ScriptedToolCall, ScriptedTurn
from agents_celery.testing import ScriptResponder
from agents_celery.testing.responders import FakeReply

from .conftest import TEST_REDIS_URL
from .support.invariants import counter_of
from .test_responses import Server

pytestmark = pytest.mark.timeout(120)

ROUNDS, CALLS = 2, 2
#: The Django app asks an API key (the SDKs send theirs as a bearer token); the Flask server asks none.
KEY = "sk-test-key"


class TwoRounds:
    """The model: in each turn (counted by the user messages it is sent), two rounds of two calls of the client's
    ``lookup`` tool, then ``answer <turn>``. Call ids and cities name turn, round and call."""

    def __call__(self, request: dict[str, Any]) -> FakeReply:
        messages = request.get("messages") or []
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        turn = len(users)
        done = sum(1 for m in messages[users[-1] :] if m.get("role") == "assistant") if users else 0
        if done >= ROUNDS:
            return FakeReply(text=f"answer {turn}")
        calls = [
            ScriptedToolCall("lookup", {"city": f"t{turn}r{done}c{i}"}, f"call_t{turn}r{done}c{i}")
            for i in range(CALLS)
        ]
        return FakeReply(text=f"round {done}. " if done else "", tool_calls=calls)


def expected_cities(turn: int) -> list[str]:
    return [f"t{turn}r{r}c{i}" for r in range(ROUNDS) for i in range(CALLS)]


@pytest.fixture(scope="module")
def django_front(apis: Any) -> Any:
    return apis.get("django", api_key=KEY)


@pytest.fixture(params=["flask", "django"])
def base_url(request: pytest.FixtureRequest, fast_settings: Any, worker: Any) -> Iterator[str]:
    """The ``/v1`` of one front end."""
    if request.param == "django":
        yield request.getfixturevalue("django_front").url + "/v1"
        return
    server = Server(Runtime(settings=fast_settings))
    yield server.url + "/v1"
    server.close()


@pytest.fixture
def model(fake_openai: Any) -> Iterator[Any]:
    fake_openai.responder = TwoRounds()
    yield fake_openai


def users_seen(fake_openai: Any) -> list[str]:
    """The user messages of the model's last request (the session's history and the new message)."""
    return [m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "user"]


# -- pydantic-ai ---------------------------------------------------------------------------------------------


def test_pydantic_ai_responses_model_with_its_defaults(base_url: str, model: Any) -> None:
    """``OpenAIResponsesModel`` as it is: stateless, the whole history in each request (the outputs of the first
    round come back with the second round's), then a second run with ``message_history``."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    seen: Counter[str] = Counter()
    client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    agent = Agent(OpenAIResponsesModel("fake", provider=OpenAIProvider(openai_client=client)))

    @agent.tool_plain
    def lookup(city: str) -> str:
        """The weather in a city."""
        seen[city] += 1
        return f"weather of {city}"

    async def both() -> list[Any]:
        async with client:
            first = await agent.run("first question")
            second = await agent.run("second question", message_history=first.all_messages())
            return [first, second]

    first, second = asyncio.run(both())
    assert (first.output, second.output) == ("answer 1", "answer 2")
    assert seen == Counter(expected_cities(1) + expected_cities(2))  # each call once
    assert users_seen(model) == ["first question", "second question"]  # the next run of the same session
    tools = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert tools == [f"weather of {c}" for c in expected_cities(1) + expected_cities(2)]


# -- the OpenAI Agents SDK -----------------------------------------------------------------------------------


class Sdk:
    """An Agents SDK agent over our ``/v1``, its ``lookup`` tool counting calls, its client closed at the end; a
    scenario runs in one event loop (the SDK's async client is bound to the loop it first ran in)."""

    def __init__(self, base_url: str, **options: Any) -> None:
        from agents import Agent, OpenAIResponsesModel, function_tool, set_tracing_disabled

        set_tracing_disabled(True)
        self.seen: Counter[str] = Counter()
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)

        @function_tool
        def lookup(city: str) -> str:
            """The weather in a city."""
            self.seen[city] += 1
            return f"weather of {city}"

        self.agent = Agent(name="client", model=OpenAIResponsesModel("fake", self.client), tools=[lookup], **options)

    def run(self, scenario: Callable[[Any], Awaitable[list[Any]]]) -> list[Any]:
        async def closing() -> list[Any]:
            async with self.client:
                return await scenario(self.agent)

        return asyncio.run(closing())

    def check(self, model: Any, results: list[Any]) -> None:
        """Both turns answered, every call ran once, and the second turn went on the first's session."""
        assert [r.final_output for r in results] == ["answer 1", "answer 2"]
        assert self.seen == Counter(expected_cities(1) + expected_cities(2))
        assert users_seen(model) == ["first question", "second question"]


def test_agents_sdk_runner_resends_the_whole_history(base_url: str, model: Any) -> None:
    from agents import Runner

    async def scenario(agent: Any) -> list[Any]:
        first = await Runner.run(agent, "first question")
        second = await Runner.run(agent, [*first.to_input_list(), {"role": "user", "content": "second question"}])
        return [first, second]

    sdk = Sdk(base_url)
    sdk.check(model, sdk.run(scenario))


def test_agents_sdk_previous_response_id(base_url: str, model: Any) -> None:
    from agents import Runner

    async def scenario(agent: Any) -> list[Any]:
        first = await Runner.run(agent, "first question", auto_previous_response_id=True)
        assert first.last_response_id
        second = await Runner.run(agent, "second question", previous_response_id=first.last_response_id)
        return [first, second]

    sdk = Sdk(base_url)
    sdk.check(model, sdk.run(scenario))


def test_agents_sdk_run_streamed_ends_with_the_final_response(base_url: str, model: Any) -> None:
    from agents import Runner

    async def scenario(agent: Any) -> list[Any]:
        results: list[Any] = []
        history: list[Any] = []
        for question in ("first question", "second question"):
            result = Runner.run_streamed(agent, [*history, {"role": "user", "content": question}])
            kinds = [event.type async for event in result.stream_events()]
            assert "raw_response_event" in kinds and result.is_complete
            results.append(result)
            history = result.to_input_list()
        return results

    sdk = Sdk(base_url)
    sdk.check(model, sdk.run(scenario))


def test_agents_sdk_conversation_id(base_url: str, model: Any) -> None:
    """``Runner.run(..., conversation_id=...)``: the SDK sends only what is new, with ``conversation``."""
    from agents import Runner

    sdk = Sdk(base_url)

    async def scenario(agent: Any) -> list[Any]:
        conversation = await sdk.client.conversations.create()
        first = await Runner.run(agent, "first question", conversation_id=conversation.id)
        second = await Runner.run(agent, "second question", conversation_id=conversation.id)
        return [first, second]

    sdk.check(model, sdk.run(scenario))


def test_agents_sdk_openai_conversations_session(base_url: str, model: Any) -> None:
    """``OpenAIConversationsSession``: ``POST /v1/conversations``, the turn's items added with ``POST
    .../items``, read back (``GET .../items``, paged, ``order=asc``) and resent for the next turn."""
    from agents import Runner
    from agents.memory import OpenAIConversationsSession

    sdk = Sdk(base_url)
    items: list[Any] = []

    async def scenario(agent: Any) -> list[Any]:
        session = OpenAIConversationsSession(openai_client=sdk.client)
        first = await Runner.run(agent, "first question", session=session)
        second = await Runner.run(agent, "second question", session=session)
        items.extend(await session.get_items())
        return [first, second]

    sdk.check(model, sdk.run(scenario))
    texts = [i["content"][0]["text"] for i in items if i.get("type") == "message" and i["role"] == "user"]
    assert texts == ["first question", "second question"]
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    assert len(outputs) == 2 * ROUNDS * CALLS


@pytest.mark.parametrize("resend", [False, True], ids=["new-items-only", "whole-history"])
def test_the_openai_sdk_in_a_conversation_with_tool_rounds(base_url: str, model: Any, resend: bool) -> None:
    """The openai SDK's own loop with ``conversation``: each request sends only what is new (as a client of
    OpenAI's conversations does), or the whole history again; two rounds a turn, two turns, one session."""
    seen: Counter[str] = Counter()
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]
    with openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0) as client:
        conversation = client.conversations.create()
        history: list[Any] = []
        for turn, question in enumerate(("first question", "second question"), start=1):
            new: list[Any] = [{"role": "user", "content": question}]
            while True:
                sent = [*history, *new] if resend else new
                made = client.responses.create(model="fake", input=sent, tools=tools, conversation=conversation.id)  # type: ignore[arg-type]
                history += new
                calls = [i for i in made.output if i.type == "function_call"]
                if not calls:
                    break
                for c in calls:
                    seen[json.loads(c.arguments)["city"]] += 1
                history += [c.model_dump(exclude_none=True) for c in calls]
                new = [{"type": "function_call_output", "call_id": c.call_id, "output": "fine"} for c in calls]
            assert made.output_text.endswith(f"answer {turn}")
            history.append({"role": "assistant", "content": made.output_text})
    assert seen == Counter(expected_cities(1) + expected_cities(2))
    assert users_seen(model) == ["first question", "second question"]


def test_conversation_items_page_and_order(base_url: str) -> None:
    """``POST .../items`` adds; ``GET .../items`` answers newest first by default, with ``limit``, ``after`` and
    ``has_more`` (the SDK's auto-paging reads every page)."""
    with openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0) as client:
        conversation = client.conversations.create()
        added = client.conversations.items.create(
            conversation.id,
            items=[{"type": "message", "role": "user", "content": f"m{i}"} for i in range(5)],  # type: ignore[misc]
        )
        assert len(added.data) == 5
        newest = client.conversations.items.list(conversation.id, limit=2)
        assert [i.content[0].text for i in newest.data] == ["m4", "m3"] and newest.has_more  # type: ignore[union-attr]
        every = [i.content[0].text for i in client.conversations.items.list(conversation.id, limit=2, order="asc")]  # type: ignore[union-attr]
        assert every == [f"m{i}" for i in range(5)]
        with pytest.raises(openai.BadRequestError):
            client.conversations.items.list(conversation.id, limit=1000)


def test_agents_sdk_hosted_mcp_tool_takes_the_agent_s_approvals(
    base_url: str, fake_openai: Any, key_prefix: str
) -> None:
    """A tool of the agent that needs a confirmation: the SDK declares a ``HostedMCPTool`` whose ``server_label``
    is the agent, answers the ``mcp_approval_request`` with ``on_approval_request`` (stateless: the whole history
    and its ``mcp_approval_response``) and gets the final answer; the tool ran once, with the approval."""
    import redis
    from agents import Agent as SdkAgent
    from agents import HostedMCPTool, Runner, set_tracing_disabled
    from agents import OpenAIResponsesModel as SdkModel

    set_tracing_disabled(True)
    path = f"/tmp/{uuid.uuid4().hex}"
    turn = ScriptedTurn(tool_calls=[ScriptedToolCall("delete_file", {"path": path}, "call_appr1")])
    fake_openai.responder = ScriptResponder([turn, "Deleted, as you approved."])
    asked: list[str] = []

    def on_approval(request: Any) -> dict[str, Any]:
        asked.append(request.data.name)
        return {"approve": True}

    config = {"type": "mcp", "server_label": "fake", "server_url": "http://127.0.0.1:9", "require_approval": "always"}
    hosted = HostedMCPTool(tool_config=config, on_approval_request=on_approval)  # type: ignore[arg-type]
    client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    agent = SdkAgent(name="client", model=SdkModel("fake", client), tools=[hosted])

    async def scenario() -> Any:
        async with client:
            return await Runner.run(agent, f"delete {path}")

    result = asyncio.run(scenario())
    assert result.final_output == "Deleted, as you approved." and asked == ["delete_file"]
    with redis.Redis.from_url(TEST_REDIS_URL) as r:
        assert counter_of(r, key_prefix)(f"delete_file:{path}") == 1


def test_a_history_whose_run_is_gone_is_context_of_a_new_run(base_url: str, fake_openai: Any) -> None:
    """A client resends a history whose run expired (or never was ours): a new message after it starts a new run
    (the history is context for the model); the answers alone are 404, as for any response we do not have."""
    fake_openai.responder = ScriptResponder(["fresh answer"])
    gone = "call_" + "f" * 32 + "_c1"
    history = [
        {"role": "user", "content": "long ago"},
        {"type": "function_call", "call_id": gone, "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": gone, "output": "old"},
    ]
    with openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0) as client:
        made = client.responses.create(model="fake", input=[*history, {"role": "user", "content": "now"}])  # type: ignore[arg-type]
        assert made.output_text == "fresh answer"
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model="fake", input=history)  # type: ignore[arg-type]
    system = fake_openai.requests[-1]["messages"][0]["content"]
    assert "long ago" in system  # the history we do not hold, as context
