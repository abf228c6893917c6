"""``CeleryRunner``: the caller's drop-in for ``agents.Runner``, the run happening on the workers.

::

    from agents_celery.contrib.openai_agents import CeleryRunner

    result = CeleryRunner.run_sync(agent, "Delete a.txt")       # survives the death of any worker
    if result.interruptions:
        state = result.to_state()
        state.approve(result.interruptions[0])
        result = CeleryRunner.run_sync(agent, state)            # continues the same run

The agent must be served by a worker (``agents-celery worker --agents <its module>``): the caller names it, the
worker runs it. ``run`` / ``run_sync`` return when the run ends or pauses for approvals; ``run_streamed`` returns at
once, and its ``stream_events()`` yields the SDK's own stream events while the run goes on (:mod:`.stream`);
``follow(agent, run_id)`` does the same from any process, by the run's id. Each returns the SDK's result shape
(:mod:`.results`). ``context`` travels as JSON: the tools on the worker see it as a dict.

The Runtime is ``CeleryRunner.runtime`` (set it with :meth:`CeleryRunner.configure`), else one made from the
environment on first use.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from agents import Agent as SdkAgent
from agents import RunState
from agents.stream_events import AgentUpdatedStreamEvent, StreamEvent
from pydantic_core import to_jsonable_python

from ...content import text_of
from ...errors import RunFailedError, ValidationError
from ...runtime import Runtime
from .guest import CLIENT_KEY, DEFAULT_MAX_TURNS, served_name
from .results import (
    CeleryRunResult,
    Graph,
    decisions_of,
    interruptions_of,
    run_items,
    run_of,
    state_of,
    typed_output,
)
from .stream import Translation


class CeleryRunner:
    """``agents.Runner``'s names (``run``, ``run_sync``, ``run_streamed``), the run on the workers (module docs)."""

    runtime: ClassVar[Runtime | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def configure(cls, runtime: Runtime) -> None:
        """Use ``runtime`` (its Redis, its Celery app) for every run started here."""
        cls.runtime = runtime

    @classmethod
    def _runtime(cls) -> Runtime:
        with cls._lock:
            if cls.runtime is None:
                cls.runtime = Runtime()
            return cls.runtime

    @classmethod
    async def run(
        cls,
        starting_agent: SdkAgent[Any],
        input: str | list[Any] | RunState[Any, Any],
        *,
        session_id: str | None = None,
        context: Any = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        run_id: str | None = None,
    ) -> CeleryRunResult:
        """Run ``starting_agent`` on the workers (or continue the run a ``RunState`` of :meth:`CeleryRunResult.
        to_state` was given for, with the decisions made on it) and return when it ends or pauses."""
        started = await cls._start(starting_agent, input, session_id, context, max_turns, run_id)
        await asyncio.to_thread(_wait, started.runtime, started.run_id)
        return await started.result()

    @classmethod
    def run_sync(
        cls,
        starting_agent: SdkAgent[Any],
        input: str | list[Any] | RunState[Any, Any],
        *,
        session_id: str | None = None,
        context: Any = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        run_id: str | None = None,
    ) -> CeleryRunResult:
        """:meth:`run`, waited for (not from inside a running event loop, as ``Runner.run_sync``)."""
        coro = cls.run(
            starting_agent, input, session_id=session_id, context=context, max_turns=max_turns, run_id=run_id
        )
        return asyncio.run(coro)

    @classmethod
    def run_streamed(
        cls,
        starting_agent: SdkAgent[Any],
        input: str | list[Any],
        *,
        session_id: str | None = None,
        context: Any = None,
        max_turns: int = DEFAULT_MAX_TURNS,
    ) -> CeleryRunResultStreaming:
        """Start the run on the workers and return at once: ``stream_events()`` follows it (module docs)."""
        rt = cls._runtime()
        message, options = _request(input, context, max_turns)
        stream = rt.stream(served_name(starting_agent), message, session_id=session_id, client=options)
        return CeleryRunResultStreaming(rt, starting_agent, stream.id, input, context, max_turns)

    @classmethod
    def follow(cls, starting_agent: SdkAgent[Any], run_id: str, *, after: int = -1) -> CeleryRunResultStreaming:
        """A run started anywhere, followed from here by its id: its events after offset ``after`` (all of them by
        default), as :meth:`run_streamed` gives them."""
        rt = cls._runtime()
        state, _ = rt.store.load(run_id)
        options = state.client.get(CLIENT_KEY) or {}
        first = next((m.get("content") for m in state.new_messages if m.get("role") == "user"), "")
        given = options.get("input") or text_of(first)
        return CeleryRunResultStreaming(
            rt, starting_agent, run_id, given, options.get("context"), options.get("max_turns") or 10, after
        )

    @classmethod
    async def _start(
        cls,
        agent: SdkAgent[Any],
        input: str | list[Any] | RunState[Any, Any],
        session_id: str | None,
        context: Any,
        max_turns: int,
        run_id: str | None,
    ) -> _Started:
        rt = cls._runtime()
        if isinstance(input, RunState):
            known = run_id or run_of(input)
            if known is None:
                raise ValidationError(
                    "this RunState was not given by CeleryRunner here: pass run_id=... (the result's run_id)"
                )
            view = await asyncio.to_thread(rt.get, known)
            decisions = await decisions_of(agent, input, list(view.pending))
            await asyncio.to_thread(rt.continue_run, known, decisions)
            state, _ = await asyncio.to_thread(rt.store.load, known)
            options = state.client.get(CLIENT_KEY) or {}
            return _Started(rt, agent, known, options.get("input") or _first_text(state), context, max_turns)
        message, options = _request(input, context, max_turns)
        stream = await asyncio.to_thread(rt.stream, served_name(agent), message, session_id=session_id, client=options)
        return _Started(rt, agent, stream.id, input, context, max_turns)


class _Started:
    """A run started (or continued) for a caller, and how to make its result."""

    def __init__(
        self, rt: Runtime, agent: SdkAgent[Any], run_id: str, given: Any, context: Any, max_turns: int
    ) -> None:
        self.runtime, self.agent, self.run_id = rt, agent, run_id
        self.given, self.context, self.max_turns = given, context, max_turns

    async def result(self) -> CeleryRunResult:
        """The run's result as it stands (ended or paused); RunFailedError for a run that failed."""
        state, _ = await asyncio.to_thread(self.runtime.store.load, self.run_id)
        if state.status.value == "failed" and state.error is not None:
            raise RunFailedError(
                f"run {self.run_id!r} failed: {state.error.type}: {state.error.message}", self.run_id, state.error.type
            )
        graph = Graph(self.agent)
        new = run_items(graph, _generated(state.new_messages))
        last = graph.start
        for item in new:
            last = getattr(item, "target_agent", last)
        result = CeleryRunResult(
            run_id=self.run_id,
            input=self.given,
            new_items=new,
            final_output=typed_output(last, state.output),
            interruptions=[],
            last_agent=last,
            status=state.status.value,
            context=self.context,
            max_turns=self.max_turns,
            saved_state=state.guest_state.get("run_state") if state.guest_state else None,
            pending=list(state.pending),
        )
        if state.pending:
            result._state = await state_of(result, self.agent)
            result.interruptions = interruptions_of(result._state, result.pending, self.agent)
        return result


def _generated(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's own stored items without the user messages it was given (the leading ones)."""
    given = 0
    while given < len(messages) and messages[given].get("role") == "user":
        given += 1
    return [m for m in messages[given:] if "type" in m]


class CeleryRunResultStreaming:
    """A run on the workers, followed: ``stream_events()`` yields the SDK's stream events; once it has finished
    (``is_complete``), the result's fields are set (``final_output``, ``new_items``, ``interruptions``,
    ``to_state()``...), as on ``agents.RunResultStreaming``."""

    def __init__(
        self,
        rt: Runtime,
        agent: SdkAgent[Any],
        run_id: str,
        given: Any,
        context: Any,
        max_turns: int,
        after: int = -1,
    ) -> None:
        self._started = _Started(rt, agent, run_id, given, context, max_turns)
        self.run_id = run_id
        self.current_agent = agent
        self.is_complete = False
        self._after = after
        self._result: CeleryRunResult | None = None

    async def stream_events(self) -> AsyncIterator[StreamEvent]:
        """The run's events as the SDK's, from the start (or ``after``), until it ends or pauses."""
        translation = Translation(Graph(self._started.agent))
        for event in translation.started():
            yield event
        stream = self._started.runtime.get_stream(self.run_id)
        async for ev in stream.aevents(None if self._after < 0 else self._after):
            for event in translation.take(ev):
                if isinstance(event, AgentUpdatedStreamEvent):
                    self.current_agent = event.new_agent
                yield event
        self._result = await self._started.result()
        self.is_complete = True

    def cancel(self) -> None:
        """Stop the run (it ends ``cancelled``; the workers stop its model call or tool at once)."""
        self._started.runtime.stop(self.run_id)

    def _done(self) -> CeleryRunResult:
        if self._result is None:
            raise RuntimeError("the run's result is known once stream_events() has been read to its end")
        return self._result

    @property
    def final_output(self) -> Any:
        return self._result.final_output if self._result is not None else None

    @property
    def new_items(self) -> list[Any]:
        return self._result.new_items if self._result is not None else []

    @property
    def interruptions(self) -> list[Any]:
        return self._result.interruptions if self._result is not None else []

    @property
    def last_agent(self) -> SdkAgent[Any]:
        return self._result.last_agent if self._result is not None else self.current_agent

    def to_state(self) -> RunState[Any, Any]:
        return self._done().to_state()

    def to_input_list(self) -> list[Any]:
        return self._done().to_input_list()


def _request(input: str | list[Any], context: Any, max_turns: int) -> tuple[Any, dict[str, Any]]:
    """The run's message (the text of its last user message) and what the worker's segment is given (its
    ``client`` options: the context as JSON, max_turns, and a list input's items)."""
    try:
        options: dict[str, Any] = {"context": to_jsonable_python(context), "max_turns": max_turns}
    except Exception as exc:  # pydantic_core's error: not a JSON value
        raise ValidationError(f"the run's context must be JSON (it travels to the workers): {exc}") from None
    if isinstance(input, str):
        return input, {CLIENT_KEY: options}
    items = to_jsonable_python(list(input))
    users = [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
    if not users:
        raise ValidationError("a list input needs a user message")
    options["input"] = items
    return text_of(users[-1].get("content")) or "[input items]", {CLIENT_KEY: options}


def _first_text(state: Any) -> str:
    first = next((m.get("content") for m in state.new_messages if m.get("role") == "user"), "")
    return text_of(first)


def _wait(rt: Runtime, run_id: str) -> None:
    """Until the run ends or pauses."""
    for _ in rt.get_stream(run_id).events():
        pass
