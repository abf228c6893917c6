"""Hooks: documented no-op methods around steps, model calls and tool calls.

Subclass :class:`Hooks` and override what you need; pass instances as ``Agent(hooks=[...])``. Hooks run
inside the step, on the worker, and **run again when a step is retried** after a crash or a lost lease:
keep them idempotent or tolerant of repeats. ``before_*`` hooks run in the order given, ``after_*`` hooks
in reverse. A hook that raises is logged and ignored, unless it raises
:class:`~agents_celery.errors.StopStep`, which stops the step and fails the run with its message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import StopStep

log = logging.getLogger("agents_celery")


@dataclass
class StepInfo:
    """What hooks are told about the step they run in."""

    run_id: str
    agent_id: str
    session_id: str
    step: int
    kind: str
    attempt: int
    started: float = field(default_factory=time.monotonic)


class Hooks:
    """Base class: every method is a no-op. Runs on the worker, and again on a retried step."""

    def before_step(self, step: StepInfo) -> None:
        """Before a step does its work (after the lease is taken and the state loaded)."""

    def after_step(self, step: StepInfo, status: str) -> None:
        """After a step committed, with the run's new status."""

    def after_commit(self, step: StepInfo) -> None:
        """After the checkpoint is committed and before the next step is enqueued."""

    def before_model_call(self, step: StepInfo, messages: list[dict[str, Any]]) -> None:
        """Before each model call (a retried call runs this again)."""

    def after_model_call(self, step: StepInfo, message: dict[str, Any]) -> None:
        """After the model answered, with the assembled assistant message."""

    def before_tool_call(self, step: StepInfo, tool_name: str, arguments: dict[str, Any]) -> None:
        """Before a tool runs (not when a recorded result is reused)."""

    def after_tool_call(self, step: StepInfo, tool_name: str, result: str, error: str | None) -> None:
        """After a tool ran, with its result text and error (None on success)."""


class LoggingHooks(Hooks):
    """Logs steps, model calls and tool calls with run id, step and attempt."""

    def before_step(self, step: StepInfo) -> None:
        log.info("run=%s step=%d attempt=%d kind=%s: started", step.run_id, step.step, step.attempt, step.kind)

    def after_step(self, step: StepInfo, status: str) -> None:
        took = (time.monotonic() - step.started) * 1000
        log.info(
            "run=%s step=%d attempt=%d: committed, status=%s (%.1f ms)",
            step.run_id, step.step, step.attempt, status, took,
        )  # fmt: skip

    def after_tool_call(self, step: StepInfo, tool_name: str, result: str, error: str | None) -> None:
        log.info("run=%s step=%d: tool %s %s", step.run_id, step.step, tool_name, "failed" if error else "done")


class MetricsHooks(Hooks):
    """Counts steps, model calls and tool calls in this process (``counts``)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def after_step(self, step: StepInfo, status: str) -> None:
        self._count(f"steps.{step.kind}")

    def after_model_call(self, step: StepInfo, message: dict[str, Any]) -> None:
        self._count("model_calls")

    def after_tool_call(self, step: StepInfo, tool_name: str, result: str, error: str | None) -> None:
        self._count("tool_errors" if error else "tool_calls")


def call_hooks(hooks: Sequence[Hooks], name: str, *args: Any) -> None:
    """Call ``name`` on every hook: ``before_*`` in order, ``after_*`` in reverse.

    A failing hook is logged and swallowed; StopStep propagates.
    """
    ordered = reversed(hooks) if name.startswith("after") else iter(hooks)
    for hook in ordered:
        try:
            getattr(hook, name)(*args)
        except StopStep:
            raise
        except Exception:
            log.exception("hook %s.%s failed; ignored", type(hook).__name__, name)
