"""Hooks: before_* in order, after_* in reverse, a failing hook is logged and ignored, StopStep stops."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agents_celery.errors import StopStep
from agents_celery.hooks import Hooks, MetricsHooks, StepInfo, call_hooks

INFO = StepInfo(run_id="r", agent_id="a", session_id="s", step=0, kind="model", attempt=1)


class Recorder(Hooks):
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def before_step(self, step: StepInfo) -> None:
        self.calls.append(f"before:{self.name}")

    def after_step(self, step: StepInfo, status: str) -> None:
        self.calls.append(f"after:{self.name}")


class Broken(Hooks):
    def before_step(self, step: StepInfo) -> None:
        raise RuntimeError("boom")


class Guard(Hooks):
    def before_step(self, step: StepInfo) -> None:
        raise StopStep("not allowed")


def test_before_in_order_after_in_reverse() -> None:
    calls: list[str] = []
    hooks = [Recorder("a", calls), Recorder("b", calls)]
    call_hooks(hooks, "before_step", INFO)
    call_hooks(hooks, "after_step", INFO, "completed")
    assert calls == ["before:a", "before:b", "after:b", "after:a"]


def test_a_failing_hook_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    with caplog.at_level(logging.ERROR, logger="agents_celery"):
        call_hooks([Broken(), Recorder("after-broken", calls)], "before_step", INFO)
    assert calls == ["before:after-broken"]
    assert "Broken.before_step failed" in caplog.text


def test_stop_step_propagates() -> None:
    with pytest.raises(StopStep, match="not allowed"):
        call_hooks([Guard()], "before_step", INFO)


def test_metrics_hooks_count() -> None:
    metrics = MetricsHooks()
    call_hooks([metrics], "after_step", INFO, "completed")
    call_hooks([metrics], "after_tool_call", INFO, "t", "ok", None)
    call_hooks([metrics], "after_tool_call", INFO, "t", "Error", "boom")
    assert metrics.counts == {"steps.model": 1, "tool_calls": 1, "tool_errors": 1}


def test_worker_level_hooks_hear_model_and_tool_calls(settings: Any) -> None:
    """Hooks given to the worker (``configure(app, hooks=...)``) are told what an agent's own hooks are told."""
    from agents_celery import Agent, ScriptedModel, ScriptedToolCall, ScriptedTurn, tool
    from agents_celery.testing import InlineRunner

    @tool
    def double(n: int) -> int:
        """Double a number."""
        return 2 * n

    heard: list[str] = []

    class Everything(Hooks):
        def before_model_call(self, step: StepInfo, messages: list[dict[str, Any]]) -> None:
            heard.append("before_model_call")

        def after_model_call(self, step: StepInfo, message: dict[str, Any]) -> None:
            heard.append("after_model_call")

        def before_tool_call(self, step: StepInfo, tool_name: str, arguments: dict[str, Any]) -> None:
            heard.append(f"before_tool_call:{tool_name}:{arguments}")

        def after_tool_call(self, step: StepInfo, tool_name: str, result: str, error: str | None) -> None:
            heard.append(f"after_tool_call:{tool_name}:{result}")

    model = ScriptedModel([ScriptedTurn("", [ScriptedToolCall("double", {"n": 21})]), "42"])
    agent = Agent(name="doubler", model=model, tools=[double])
    with InlineRunner([agent], settings=settings, hooks=[Everything()]) as runner:
        assert runner.run("doubler", "double 21").status == "completed"
    assert heard == [
        "before_model_call",
        "after_model_call",
        "before_tool_call:double:{'n': 21}",
        "after_tool_call:double:42",
        "before_model_call",
        "after_model_call",
    ]


def test_the_default_logging_hooks_log_tool_calls(runtime: Any, worker: Any) -> None:
    """A worker started with no hooks of its own logs each tool call (LoggingHooks is the default)."""
    from .conftest import wait_for

    view = runtime.run("offline", "What time is it?", timeout=30)
    assert view.status == "completed"
    line = f"run={view.run_id} step=1: tool get_time done"
    wait_for(lambda: line in worker.log.read_text(errors="replace"), what="the tool call's log line")
