"""Hooks: before_* in order, after_* in reverse, a failing hook is logged and ignored, StopStep stops."""

from __future__ import annotations

import logging

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
