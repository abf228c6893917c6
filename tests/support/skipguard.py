"""A skipped test fails the run: a missing component (RabbitMQ, redis-server, Chromium, an extra) must never turn
into a silent skip. Loaded by ``tests/conftest.py``.

Skips (``pytest.skip``, ``skipif``, ``importorskip``, a module skipped at collection) and xfails (expected
failures and unexpected passes alike) are collected as they are reported; at the end of the session the run
fails when there is any, and the summary lists them. ``AGENTS_CELERY_ALLOW_SKIPS=1`` turns the guard off for a
local loop on a machine that lacks something. Deselection (``-m "not slow"``, ``-k``) is not a skip: it is
never reported, so ``make test-fast`` and ``scripts/versions-suite`` are unaffected.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

ALLOW = "AGENTS_CELERY_ALLOW_SKIPS"

_seen: list[str] = []


def _allowed() -> bool:
    return os.environ.get(ALLOW, "") not in ("", "0")


def _note(report: pytest.CollectReport | pytest.TestReport) -> None:
    if hasattr(report, "wasxfail"):
        _seen.append(f"{report.nodeid}: xfail ({report.outcome}) {report.wasxfail}".rstrip())
    elif report.skipped:
        longrepr: Any = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        _seen.append(f"{report.nodeid}: skipped: {reason}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # A skip is reported at setup (skipif, a fixture's skip) or in the call; an xfail in the call.
    if report.when in ("setup", "call"):
        _note(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:  # a module that skips itself (importorskip, allow_module_level)
        _note(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _seen and not _allowed() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _seen:
        return
    allowed = _allowed()
    terminalreporter.section("skipped or xfailed tests" + (f" (allowed by {ALLOW})" if allowed else ": the run fails"))
    for line in _seen:
        terminalreporter.write_line(line)
    if not allowed:
        terminalreporter.write_line(
            f"A skip hides a missing component: install it (.ci/run does), or set {ALLOW}=1 for a local loop."
        )
