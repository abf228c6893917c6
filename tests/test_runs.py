"""Run state: schema versions fail fast, the transition table is enforced."""

from __future__ import annotations

import json

import pytest

from agents_celery.errors import SchemaVersionError, StateError
from agents_celery.runs import TRANSITIONS, RunState, RunStatus, load_state


def test_unknown_schema_version_fails_fast_naming_supported_versions() -> None:
    raw = RunState(run_id="r", agent_id="a", session_id="s").to_json()
    assert load_state(raw).run_id == "r"
    data = json.loads(raw)
    data["schema_version"] = 99
    with pytest.raises(SchemaVersionError, match=r"99.*\[1, 2\]"):
        load_state(json.dumps(data))


def test_transitions_follow_the_table() -> None:
    state = RunState(run_id="r", agent_id="a", session_id="s")
    running = state.moved_to(RunStatus.RUNNING)
    assert running.moved_to(RunStatus.PAUSED).moved_to(RunStatus.RUNNING).status == RunStatus.RUNNING
    with pytest.raises(StateError):
        state.moved_to(RunStatus.PAUSED)  # queued cannot pause
    done = running.moved_to(RunStatus.COMPLETED)
    for target in RunStatus:
        with pytest.raises(StateError):
            done.moved_to(target)
    assert all(not TRANSITIONS[s] for s in RunStatus if s.is_final)
