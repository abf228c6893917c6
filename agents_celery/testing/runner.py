"""Run an agent's steps to the end in the calling process: unit tests of your agents without a worker.

The steps go through the same engine, Lua scripts and event log a worker uses, against a real Redis (the one
at ``redis_url`` or ``AGENTS_CELERY_REDIS_URL`` when it answers, else a private embedded one), but nothing is
sent to a broker: each step waits in an in-process queue until :meth:`InlineRunner.drain` runs it, in this
thread. Pair it with :class:`~agents_celery.models.ScriptedModel` or :class:`FakeOpenAIServer` (the real
``openai`` SDK against a local server)::

    from agents_celery.testing import InlineRunner

    def test_assistant_tells_the_time():
        with InlineRunner([assistant]) as runner:
            view = runner.run("assistant", "What time is it?")
            assert view.status == "completed" and "12:00" in view.output
            assert [e.type for e in runner.events(view.run_id)][0] == "RUN_STARTED"

A run that pauses for a confirmation stays paused until :meth:`InlineRunner.continue_run`. The runner writes under
a key prefix of its own and deletes those keys when it closes (it never flushes a database). Crash recovery (leases
expiring, the sweeper) needs real workers: the durability tests of agents-celery itself run on those.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ..agent import Agent
from ..decisions import Decision
from ..engine.engine import Engine
from ..events import Event
from ..hooks import Hooks
from ..runs import RunView
from ..runtime import RunStream, Runtime
from ..settings import Settings, load_settings
from ..storage.connections import answers, connect
from ..storage.store import RunStore
from .embedded import EmbeddedRedis

__all__ = ["InlineRunner"]


class InlineRunner:
    """Runs ``agents``' steps in the calling process (see the module docs).

    Args:
        agents: The agents to serve.
        redis_url: The Redis to use; default ``AGENTS_CELERY_REDIS_URL`` if it answers, else an embedded one.
        settings: Other settings (default: the environment). Keys go under ``<key_prefix>:inline-<random>``.
        hooks: Worker-level hooks, as ``configure(app, hooks=...)`` takes them.
        max_steps: Steps one :meth:`drain` runs at most before it gives up (a guard against endless loops).

    Raises:
        ConfigurationError: the settings are invalid, or an embedded Redis is needed and cannot be found or started.
    """

    def __init__(
        self,
        agents: Sequence[Agent],
        *,
        redis_url: str | None = None,
        settings: Settings | None = None,
        hooks: Sequence[Hooks] = (),
        max_steps: int = 1000,
    ) -> None:
        base = settings or load_settings()
        self._embedded: EmbeddedRedis | None = None
        url = redis_url or (base.redis_url if answers(base.redis_url) else None)
        if url is None:
            self._embedded = EmbeddedRedis().start()
            url = self._embedded.url
        # A key prefix of its own, under the configured one: closing deletes exactly what this runner wrote.
        prefix = f"{base.key_prefix}:inline-{uuid.uuid4().hex[:10]}"
        self.settings = base.model_copy(update={"redis_url": url, "key_prefix": prefix})
        self.max_steps = max_steps
        self._queue: deque[tuple[str, int, str]] = deque()
        enqueue = self._queue_step
        self.runtime = Runtime(settings=self.settings, agents=list(agents), enqueue=enqueue)
        store = RunStore(connect(url), self.settings)
        self.engine = Engine(store, {a.name: a for a in agents}, enqueue, hooks)
        store.agents.publish([a.manifest() for a in agents])

    def _queue_step(self, run_id: str, step: int, agent_id: str, *_: Any, **__: Any) -> None:
        self._queue.append((run_id, step, agent_id))  # the queue and the task ids do not matter in process

    # -- driving -----------------------------------------------------------------------------------------

    def drain(self) -> list[str]:
        """Run the queued steps (and the steps they queue) until none is left: every run has ended or paused.

        Returns:
            Each step's outcome (``committed``, ``stale`` ...), in the order they ran.

        Raises:
            RuntimeError: ``max_steps`` steps ran and some are still queued.
        """
        outcomes: list[str] = []
        while self._queue:
            if len(outcomes) >= self.max_steps:
                raise RuntimeError(f"InlineRunner: still running after {self.max_steps} steps; raise max_steps?")
            run_id, step, _agent = self._queue.popleft()
            outcomes.append(self.engine.execute(run_id, step))
        return outcomes

    def stream(self, agent: Agent | str, message: str, **kwargs: Any) -> RunStream:
        """Start a run and return its stream handle; nothing runs until :meth:`drain`.

        Args:
            agent: The agent, as an object or by name.
            message: The run's first user message.
            **kwargs: The other keyword arguments of :meth:`Runtime.stream`.

        Returns:
            The run's stream handle.

        Raises:
            AgentsCeleryError: what :meth:`Runtime.stream` raises.
        """
        return self.runtime.stream(agent, message, **kwargs)

    def run(self, agent: Agent | str, message: str, **kwargs: Any) -> RunView:
        """Start a run and run it until it ends or pauses.

        Args:
            agent: The agent, as an object or by name.
            message: The run's first user message.
            **kwargs: The other keyword arguments of :meth:`Runtime.stream`.

        Returns:
            The run as it then stands.

        Raises:
            AgentsCeleryError: what :meth:`Runtime.stream` raises.
            RuntimeError: the steps went on past ``max_steps`` (:meth:`drain`).
        """
        stream = self.stream(agent, message, **kwargs)
        self.drain()
        return self.runtime.get(stream.run_id)

    def continue_run(self, run_id: str, decisions: Sequence[Decision | dict[str, Any]] | None = None) -> RunView:
        """Answer a paused run and run it until it ends or pauses again.

        Args:
            run_id: The paused run's id.
            decisions: As :meth:`Runtime.continue_run` takes them.

        Returns:
            The run as it then stands.

        Raises:
            AgentsCeleryError: what :meth:`Runtime.continue_run` raises.
            RuntimeError: the steps went on past ``max_steps`` (:meth:`drain`).
        """
        self.runtime.continue_run(run_id, decisions)
        self.drain()
        return self.runtime.get(run_id)

    def stop(self, run_id: str) -> RunView:
        """Stop a run, then run the steps still queued.

        Args:
            run_id: The run's id.

        Returns:
            The run as it then stands.

        Raises:
            RunFinishedError: the run already ended.
            RunNotFoundError: no run has that id.
            RunExpiredError: the run existed and its retention passed.
            RuntimeError: the steps went on past ``max_steps`` (:meth:`drain`).
        """
        self.runtime.stop(run_id)
        self.drain()
        return self.runtime.get(run_id)

    # -- inspecting --------------------------------------------------------------------------------------

    def get(self, run_id: str) -> RunView:
        """The run as it stands (:meth:`Runtime.get`).

        Args:
            run_id: The run's id.

        Returns:
            The run's :class:`RunView`.

        Raises:
            RunNotFoundError: no run has that id.
            RunExpiredError: the run existed and its retention passed.
        """
        return self.runtime.get(run_id)

    def events(self, run_id: str, after: int = -1) -> list[Event]:
        """The run's events after offset ``after``, as stored.

        Args:
            run_id: The run's id.
            after: The offset to read after (-1: from the start).

        Returns:
            The events, oldest first.

        Raises:
            ValidationError: ``after`` is neither -1 nor an offset.
            RunNotFoundError: no run has that id.
            RunExpiredError: the run existed and its retention passed.
        """
        return self.runtime.store.log.read(run_id, after)

    def text(self, run_id: str) -> str:
        """All the assistant text the run streamed, joined.

        Args:
            run_id: The run's id.

        Returns:
            The text of the run's ``TEXT_MESSAGE_CONTENT`` events.

        Raises:
            RunNotFoundError: no run has that id.
            RunExpiredError: the run existed and its retention passed.
        """
        return "".join(e.data["delta"] for e in self.events(run_id) if e.type == "TEXT_MESSAGE_CONTENT")

    # -- closing -----------------------------------------------------------------------------------------

    def close(self) -> None:
        """Delete this runner's keys (its own prefix only) and stop the embedded Redis, if any."""
        client = self.runtime.redis
        try:
            for key in client.scan_iter(match=f"{self.settings.key_prefix}:*", count=1000):
                client.delete(key)
        finally:
            self.engine.keeper.close()
            self.engine.store.redis.close()
            self.runtime.close()
            if self._embedded is not None:
                self._embedded.stop()

    def __enter__(self) -> InlineRunner:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
