"""Agno's own client (``agno.workflow.RemoteWorkflow``, PyPI ``agno`` in a venv of its own: scripts/ensure-agno) runs
our workflows streamed and not, through both front ends; the events it receives are checked against what Agno's own
Workflow streams for the same shape (what AgentOS sends), run in the same venv against the same fake model.

Agno streams its agents' model-request events (``ModelRequestStarted`` ...) and ``RunContentCompleted``, which we do
not: an agent step's events here are checked to be a subsequence of Agno's, from its ``RunStarted`` to its
``RunCompleted``; the workflow's own events (steps, containers, the workflow's start and end) must match exactly,
the branches of a parallel in any order (they run at once).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agents_celery.testing.responders import ScriptResponder

from .support.apis import ApiServer, SharedApis

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parent.parent
AGNO = ROOT / ".venv-agno" / "bin" / "python"
SCRIPT = ROOT / "tests" / "agno_client" / "workflows.py"
#: Agno's agent-run events (the rest of what a workflow streams is the workflow's own).
AGENT_EVENTS = ("Run", "Model", "ToolCall", "Reasoning", "Memory")


@pytest.fixture(scope="module", params=["flask", "django"])
def api(request: pytest.FixtureRequest, apis: SharedApis) -> ApiServer:
    return apis.get(request.param)


def agno(*args: str) -> dict[str, Any]:
    if not AGNO.exists():
        pytest.fail("Agno's venv is missing: run scripts/ensure-agno (make test and .ci/run do)")
    done = subprocess.run([str(AGNO), str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"agno failed:\n{done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def skeleton(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """The workflow's own events (event, step name), each parallel's inner ones sorted (its branches run at once)."""
    out: list[tuple[str, str | None]] = []
    inner: list[tuple[str, str | None]] | None = None
    for e in events:
        if e["event"].startswith(AGENT_EVENTS):
            continue
        item = (e["event"], e.get("step_name"))
        if e["event"] == "ParallelExecutionCompleted" and inner is not None:
            out += sorted(inner)
            inner = None
        if inner is not None:
            inner.append(item)
        else:
            out.append(item)
        if e["event"] == "ParallelExecutionStarted":
            inner = []
    return out


def agent_events(events: list[dict[str, Any]], step: str) -> list[str]:
    return [e["event"] for e in events if e["event"].startswith(AGENT_EVENTS) and e.get("step_name") == step]


def is_subsequence(small: list[str], big: list[str]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


@pytest.mark.parametrize(
    ("shape", "workflow", "agents", "results"),
    [
        ("sequence", "research-count-write", ["research", "write"], ["research", "count", "write"]),
        ("parallel", "two-researchers", ["scout", "analyst", "write"], ["gather", "dig", "write"]),
    ],
)
def test_agno_remote_workflow_streamed_and_not(
    api: ApiServer, fake_openai: Any, shape: str, workflow: str, agents: list[str], results: list[str]
) -> None:
    fake_openai.responder = ScriptResponder(["found five words about reefs"])  # every agent, ours and Agno's
    ours = agno(fake_openai.url, shape, api.url, workflow)
    reference, events = ours["reference"], ours["events"]
    assert skeleton(events) == skeleton(reference)
    for step in agents:
        mine, theirs = agent_events(events, step), agent_events(reference, step)
        assert mine[0] == "RunStarted" and mine[-1] == "RunCompleted" and is_subsequence(mine, theirs), (mine, theirs)
    completed = events[-1]
    assert completed["event"] == "WorkflowCompleted" and completed["content"] == "found five words about reefs"
    assert all(e["run_id"] == events[0]["run_id"] for e in events if not e["event"].startswith(AGENT_EVENTS))
    write = next(e for e in events if e["event"] == "RunCompleted" and e["step_name"] == "write")
    assert write["workflow_run_id"] == events[0]["run_id"] and write["run_id"] != events[0]["run_id"]
    output = ours["output"]
    assert output["status"] == "COMPLETED" and output["content"] == "found five words about reefs"
    assert [r["step_name"] for r in output["step_results"]] == results
    assert output["workflow_id"] == workflow and output["run_id"] != events[0]["run_id"]
    assert [s["name"] for s in ours["config"]["steps"]] == results
