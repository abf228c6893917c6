"""Structured output (issue #30 part 1): ``Agent(output_type=...)``, a run's ``output_schema``, the model asked with
``response_format``, answers validated, failed ones sent back as retried turns, and the validated output.

Real Redis, real workers, the real openai SDK against the fake OpenAI server's SchemaResponder.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
import redis
from pydantic import BaseModel, Field

from agents_celery import Agent, OutputSchemaError, OutputValidationError, Runtime, ScriptedModel
from agents_celery.errors import UnsupportedError
from agents_celery.events import EventType
from agents_celery.output import RETRY_PREFIX, check_schema, output_spec, strict_schema
from agents_celery.testing.openai_server import SchemaResponder, format_problem

from .agents.output import Forecast, forecaster
from .conftest import all_events, wait_event
from .support.invariants import assert_run_sound

PARIS = {"city": "Paris", "temperature_c": 21.5, "summary": "Sunny with a light breeze."}
POINT = {
    "type": "object",
    "title": "Point",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}, "label": {"type": "string"}},
    "required": ["x", "y"],
}


def names(events: list[Any], name: str) -> list[Any]:
    return [e for e in events if e.type is EventType.CUSTOM and e.data["name"] == name]


def model_steps(events: list[Any]) -> list[Any]:
    return [e for e in events if e.type is EventType.STEP_STARTED and e.data["metadata"]["kind"] == "model"]


# -- the schema, as the model is asked with it (no I/O) ----------------------------------------------------


class Inner(BaseModel):
    x: int = Field(description="a described ref")


class Shape(BaseModel):
    kind: Literal["a", "b"]
    note: str | None = None
    inner: Inner = Field(description="a $ref with a sibling")
    more: list[Inner] = []


def test_strict_schema_follows_the_openai_sdk_rules() -> None:
    from openai.lib._pydantic import to_strict_json_schema  # the SDK's private helper, as the reference

    assert strict_schema(Shape.model_json_schema()) == to_strict_json_schema(Shape)
    fmt = output_spec(Shape).response_format()  # type: ignore[union-attr]
    assert fmt["json_schema"]["strict"] is True and fmt["json_schema"]["name"] == "Shape"
    assert format_problem(fmt) is None


def test_a_schema_strict_mode_cannot_take_is_sent_as_given_not_strict() -> None:
    free = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True}
    assert strict_schema(free) is None
    assert strict_schema({"type": "array", "items": {"type": "string"}}) is None
    assert strict_schema({"type": "object", "properties": {"a": {"not": {"type": "null"}}}}) is None
    fmt = output_spec(free).response_format()  # type: ignore[union-attr]
    assert fmt["json_schema"] == {"name": "output", "schema": free, "strict": False}
    # property names are names, not keywords
    assert strict_schema({"type": "object", "properties": {"not": {"type": "integer"}}}) is not None


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ([1, 2], "JSON Schema object"),
        ({"type": "objekt"}, "at type"),
        ({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}, "local references"),
        ({"type": "object", "required": "a"}, "at required"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}, "$defs": {}}, "points at nothing"),
        ({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"$ref": "#/prefixItems/1"}}, "nothing"),
        ({"properties": {"a": {"$ref": "#here"}}}, "points at nothing"),
    ],
)
def test_an_invalid_output_schema_is_refused(schema: Any, words: str) -> None:
    with pytest.raises(OutputSchemaError, match=words) as caught:
        check_schema(schema)
    assert caught.value.status == 422 and caught.value.code == "invalid_output_schema"


def test_local_references_that_name_something_are_taken() -> None:
    defs = {"P~/q r": {"type": "integer"}, "A": {"$anchor": "here", "type": "string"}}
    for ref in ["#", "#/$defs/P~0~1q%20r", "#/$defs/A", "#here", "#/prefixItems/0"]:
        schema = {"prefixItems": [{"type": "integer"}], "properties": {"a": {"$ref": ref}}, "$defs": defs}
        assert check_schema(schema) is schema


def test_answers_are_checked_and_problems_named() -> None:
    spec = output_spec(Forecast)
    assert spec is not None
    assert spec.check("```json\n" + json.dumps(PARIS) + "\n```") == PARIS  # a fence is tolerated
    with pytest.raises(OutputValidationError, match="temperature_c"):
        spec.check('{"city": "Paris"}')
    with pytest.raises(OutputValidationError, match=r"not JSON|Invalid JSON"):
        output_spec(POINT).check("{nope")  # type: ignore[union-attr]
    with pytest.raises(OutputValidationError, match="at y: 'two' is not of type 'integer'"):
        output_spec(POINT).check('{"x": 1, "y": "two"}')  # type: ignore[union-attr]


# -- runs on a real worker -----------------------------------------------------------------------------------


def test_valid_on_the_first_try(runtime: Runtime, fake_openai: Any) -> None:
    fake_openai.responder = responder = SchemaResponder([PARIS])
    result = runtime.run(forecaster, "What is the weather in Paris?", timeout=30)
    assert isinstance(result, Forecast) and result == Forecast(**PARIS)
    fmt = responder.formats[-1]
    assert fmt is not None and fmt["json_schema"]["name"] == "Forecast" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"]["additionalProperties"] is False
    run_id = runtime.runs(agent_id="forecaster", limit=1).runs[0].run_id
    events = all_events(runtime, run_id)
    assert_run_sound(events)
    deltas = [e for e in events if e.type is EventType.TEXT_MESSAGE_CONTENT]
    assert len(deltas) > 3 and json.loads("".join(e.data["delta"] for e in deltas)) == PARIS  # streamed as made
    assert events[-1].type is EventType.RUN_FINISHED and events[-1].data["result"] == PARIS
    assert runtime.get(run_id).output == PARIS and not names(events, "output_retry")


def test_invalid_then_valid_is_one_visible_retry_step(runtime: Runtime, fake_openai: Any) -> None:
    fake_openai.responder = SchemaResponder(['{"city": "Paris", "temperature_c": "warm"}', PARIS])
    stream = runtime.stream(forecaster, "What is the weather in Paris?")
    events = all_events(runtime, stream.id)
    assert_run_sound(events)
    (retry,) = names(events, "output_retry")
    assert retry.data["value"]["attempt"] == 1 and "temperature_c" in retry.data["value"]["error"]
    steps = model_steps(events)
    assert [s.data["metadata"]["step"] for s in steps] == [0, 1]  # the retry is a committed step of its own
    assert steps[0].offset < retry.offset < steps[1].offset
    view = runtime.get(stream.id)
    assert view.status == "completed" and view.output == PARIS
    sent_back = [m for m in view.messages if m["role"] == "user" and m["content"].startswith(RETRY_PREFIX)]
    assert len(sent_back) == 1 and "temperature_c" in sent_back[0]["content"]
    said = [e for e in events if e.type is EventType.TEXT_MESSAGE_CONTENT and e.data["message_id"].startswith("usr_")]
    assert [e.data["delta"] for e in said] == [sent_back[0]["content"]]  # the log shows what was sent back
    asked = [r for r in fake_openai.requests if r.get("messages", [{}])[-1].get("content") == sent_back[0]["content"]]
    assert len(asked) == 1 and asked[0]["response_format"]["json_schema"]["name"] == "Forecast"


def test_never_valid_fails_the_run_with_a_clear_error(runtime: Runtime, fake_openai: Any) -> None:
    fake_openai.responder = SchemaResponder(["Sorry, I cannot answer in JSON."])
    with pytest.raises(OutputValidationError, match="did not match the output schema 'Forecast' after 2 retries"):
        runtime.run(forecaster, "What is the weather in Atlantis?", timeout=30)
    run_id = runtime.runs(agent_id="forecaster", limit=1).runs[0].run_id
    events = all_events(runtime, run_id)
    assert_run_sound(events)
    assert len(names(events, "output_retry")) == runtime.settings.output_retries == 2
    assert events[-1].type is EventType.RUN_ERROR and events[-1].data["code"] == "invalid_output"
    assert "not JSON" in events[-1].data["message"] or "Invalid JSON" in events[-1].data["message"]
    view = runtime.get(run_id)
    assert view.status == "failed" and view.output is None and view.error["type"] == "OutputValidationError"


def test_a_run_schema_overrides_the_agent_and_serves_any_agent(runtime: Runtime, fake_openai: Any) -> None:
    fake_openai.responder = responder = SchemaResponder([{"x": 1, "y": 2}])
    view = runtime.run("fake", "Where is the point?", output_schema=POINT, timeout=30)
    assert view.status == "completed" and view.output == {"x": 1, "y": 2}
    assert responder.formats[-1]["json_schema"]["name"] == "Point"  # type: ignore[index]
    # on an agent with an output_type, the run's schema wins (and run() answers the view, not a Forecast)
    view = runtime.run(forecaster, "Where is the point?", output_schema=POINT, timeout=30)
    assert view.status == "completed" and view.output == {"x": 1, "y": 2}
    assert responder.formats[-1]["json_schema"]["name"] == "Point"  # type: ignore[index]


def test_a_bad_run_schema_creates_nothing(runtime: Runtime, r: redis.Redis) -> None:
    prefix = runtime.settings.key_prefix
    before = set(r.scan_iter(match=f"{prefix}:*", count=1000))
    newest = [v.run_id for v in runtime.runs(agent_id="fake", limit=1).runs]
    with pytest.raises(OutputSchemaError, match="not a valid JSON Schema"):
        runtime.stream("fake", "hi", output_schema={"type": "object", "properties": {"a": {"type": 3}}})

    class Guest(Agent):  # an agent of another framework (a pydantic-ai agent's manifest says so)
        def manifest(self) -> dict[str, Any]:
            return {**super().manifest(), "framework": "pydantic-ai"}

    guest = Guest("guest", model=ScriptedModel(["{}"]))
    with pytest.raises(UnsupportedError, match="not supported for agent 'guest'"):
        runtime.stream(guest, "hi", output_schema=POINT)
    new = set(r.scan_iter(match=f"{prefix}:*", count=1000)) - before  # (workers' own keys come and go meanwhile)
    assert [k for k in new if b":run:{" in k or b":session:{" in k] == []
    assert [v.run_id for v in runtime.runs(agent_id="fake", limit=1).runs] == newest
    assert not runtime.runs(agent_id="guest").runs


@pytest.mark.slow
def test_kill_during_the_json_answer_retries_the_turn_and_validates_once(deploy: Any, fake_openai: Any) -> None:
    cluster = deploy("output")
    (victim,) = cluster.start(1)
    rt = cluster.runtime
    answer = {**PARIS, "summary": " ".join(f"word{i}" for i in range(80))}
    fake_openai.responder = SchemaResponder([answer], token_delay=0.02)
    stream = rt.stream(forecaster, "What is the weather in Paris?")
    wait_event(rt, stream.id, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT and e.offset > 12)
    victim.kill()  # kill -9 in the middle of the JSON
    cluster.start(1)
    events = all_events(rt, stream.id)
    assert_run_sound(events)
    (abandoned,) = names(events, "attempt_abandoned")
    assert abandoned.data["value"]["next_attempt"] == 2
    attempts = [e.data["metadata"]["attempt"] for e in model_steps(events)]
    assert attempts == [1, 2] and not names(events, "output_retry")  # the half answer was never validated
    finished = [e for e in events if e.type is EventType.RUN_FINISHED]
    assert len(finished) == 1 and finished[0].data["result"] == answer
    view = rt.get(stream.id)
    assert view.status == "completed" and view.output == answer
    assert [json.loads(m["content"]) for m in view.messages if m["role"] == "assistant"] == [answer]  # once
    assert Forecast.model_validate(view.output).summary == answer["summary"]


class PromptOnly:
    """A model adapter whose stream() takes no response_format: it is told the schema in its system prompt."""

    name = "prompt-only"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        from agents_celery.models import TextDelta

        self.prompts.append(messages[0]["content"])
        yield TextDelta('{"x": 1, "y": 2}')


def test_in_process_with_a_dict_output_type_and_a_model_told_in_its_prompt(settings: Any) -> None:
    from agents_celery.testing import InlineRunner

    script = ['{"x": 3}', '{"x": 3, "y": 4, "label": "p"}']  # invalid, then (the retried answer) valid
    scripted = Agent(name="pointer", model=ScriptedModel(script), output_type=POINT)
    model = PromptOnly()
    told = Agent(name="told", instructions="Find the point.", model=model)
    with InlineRunner([scripted, told], settings=settings) as runner:
        view = runner.run("pointer", "Where?")
        assert view.status == "completed" and view.output == {"x": 3, "y": 4, "label": "p"}
        assert len(names(runner.events(view.run_id), "output_retry")) == 1
        view = runner.run("told", "Where?", output_schema=POINT)
        assert view.status == "completed" and view.output == {"x": 1, "y": 2}
    assert model.prompts[0].startswith("Find the point.") and json.dumps(POINT) in model.prompts[0]
