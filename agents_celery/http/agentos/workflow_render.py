"""Render a workflow run's stored events in the dialect of Agno's AgentOS workflow routes (``/workflows/...``).

What AgentOS sends for a workflow run (checked against ``agno`` itself by tests/test_agno_workflows.py), from the
stored log (:mod:`agents_celery.workflows.runner` says what a workflow run stores):

- RUN_STARTED -> ``WorkflowStarted`` (a continue's RUN_STARTED: nothing);
- a workflow step's STEP_STARTED -> ``StepStarted``; its CUSTOM ``step_output`` -> ``StepOutput`` (a function step at
  the top of the plan: AgentOS sends none for agent steps, nor inside a parallel); its STEP_FINISHED ->
  ``StepCompleted`` with the step's output (one closed by a pause, a stop or a crashed attempt: nothing);
- an agent step's own run events (``RunStarted``, ``RunContent``, ``ToolCallStarted`` ... ``RunCompleted``, rendered by
  :class:`~.render.AgentOSRenderer` from the child run's log, with the step's ``step_name``, ``step_index``,
  ``step_id``, ``workflow_id`` and ``workflow_run_id``), where the workflow's log says the child paused or ended;
- a container's CUSTOM ``workflow_node`` -> ``ParallelExecutionStarted`` / ``Completed``, ``ConditionExecution...``,
  ``RouterExecution...``, ``LoopExecutionStarted``, ``LoopIterationStarted`` / ``Completed``,
  ``LoopExecutionCompleted``;
- RUN_FINISHED -> ``WorkflowCompleted`` (the last step's content, ``step_results``), ``WorkflowPaused`` (an interrupt:
  ``step_requirements`` name the calls waiting), ``WorkflowCancelled``; RUN_ERROR -> ``WorkflowError``.

Every event carries ``created_at`` (seconds), ``workflow_id``, ``workflow_name``, ``session_id``, ``run_id`` and
``event_index`` (its offset: what a reconnect takes back). Step ids are the steps' paths (``write``, ``grow@2``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ...engine.children import child_run_id
from ...events import Event, EventType
from ...runs import RunState
from ...storage.eventlog import Entry
from ...storage.follow import ChildPage, Watching
from ...workflows.plan import as_text
from ...workflows.walk import Progress, name_of
from ..sse import error_frame, frame
from .render import AGNO_STATUS, AgentOSRenderer, paused_tool

#: A container's phase -> the AgentOS event that says so.
NODE_EVENTS = {
    ("Parallel", "started"): "ParallelExecutionStarted",
    ("Parallel", "completed"): "ParallelExecutionCompleted",
    ("Condition", "started"): "ConditionExecutionStarted",
    ("Condition", "completed"): "ConditionExecutionCompleted",
    ("Router", "started"): "RouterExecutionStarted",
    ("Router", "completed"): "RouterExecutionCompleted",
    ("Loop", "started"): "LoopExecutionStarted",
    ("Loop", "iteration_started"): "LoopIterationStarted",
    ("Loop", "iteration_completed"): "LoopIterationCompleted",
    ("Loop", "completed"): "LoopExecutionCompleted",
}
#: Why a step's STEP_FINISHED does not complete it (the step goes on, or never will).
NOT_DONE = ("abandoned", "suspended", "ended", "failed", "stopped")


def plan_index(plan: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every node of a published plan by name: its ``index`` (positions), ``parent`` (its container's name),
    ``type``, ``executor`` and ``executor_name`` (an agent's name, a function's)."""
    found: dict[str, dict[str, Any]] = {}

    def visit(nodes: list[dict[str, Any]], index: tuple[int, ...], parent: str | None) -> None:
        for i, node in enumerate(nodes):
            where = (*index, i)
            executor = node.get("executor") or node["type"].lower()
            name = (node.get("agent") or {}).get("name") or str(node.get("function") or node["name"]).rsplit(".", 1)[-1]
            found[node["name"]] = {"index": where, "parent": parent, "type": node["type"], "executor": executor}
            found[node["name"]]["executor_name"] = name
            visit(list(node.get("steps") or []) + list(node.get("else_steps") or []), where, node["name"])

    visit(plan, (), None)
    return found


def step_index(index: tuple[int, ...] | list[int]) -> int | list[int]:
    """An index as AgentOS spells it: an int at the top of the plan, a list of positions inside a container."""
    return index[0] if len(index) == 1 else list(index)


def step_output(node: dict[str, Any], path: str, content: Any, run_id: str | None = None) -> dict[str, Any]:
    """A step's output in AgentOS's ``StepOutput`` shape."""
    return {
        "step_name": name_of(path),
        "step_id": path,
        "step_type": node.get("type", "Step"),
        "executor_type": node.get("executor"),
        "executor_name": node.get("executor_name"),
        "content": content,
        "step_run_id": run_id,
        "success": True,
        "error": None,
        "stop": False,
        "is_paused": False,
    }


def _content_type(content: Any) -> str:
    return "str" if content is None or isinstance(content, str) else "json"


class WorkflowPresenter:
    """Renders one workflow run's stream page by page (a :class:`~agents_celery.http.sse.Presenter`).

    Args:
        plan: The workflow's published plan (its manifest's ``steps``).
        child_log: Reads a child run's whole log (an agent step's), sync.
        confirm: The names of tools that need a confirmation, over the workflow's agents.
    """

    def __init__(
        self,
        plan: list[dict[str, Any]],
        child_log: Callable[[str], list[Event]],
        confirm: frozenset[str] = frozenset(),
    ) -> None:
        self.nodes = plan_index(plan)
        self.child_log = child_log
        self.confirm = confirm
        self.finished = False
        #: Outputs seen, by step path, in order.
        self.outputs: dict[str, Any] = {}
        #: Each child's offset shown so far, and its renderer.
        self.shown: dict[str, int] = {}
        self.renderers: dict[str, AgentOSRenderer] = {}
        #: The step each child runs (child run id -> path).
        self.steps_of: dict[str, str] = {}
        #: What the stream's tail reads along (the stream sets it): an agent step's run is followed live from its
        #: start to its end, so its tokens show as they come (:class:`~agents_celery.http.sse.FollowsChildren`).
        self.watching: Watching | None = None
        self.workflow_id = self.workflow_run_id = ""

    def needs_thread(self, page: Sequence[Entry]) -> bool:
        """Rendering a page that opens or closes a step's run reads that run's log (Redis): under asyncio, on a
        thread."""
        return any('"SUBAGENT_' in entry[1] for entry in page)

    def frames(self, events: list[Event]) -> str:
        out: list[str] = []
        for ev in events:
            out += self.render(ev)
            if self.finished:
                break
        return "".join(out)

    def error(self, exc: BaseException) -> str:
        return error_frame(exc)

    def _base(self, ev: Event, name: str, **fields: Any) -> str:
        data = {
            "event": name,
            "created_at": ev.timestamp // 1000,
            "workflow_id": ev.agent_id,
            "workflow_name": ev.agent_id,
            "session_id": ev.session_id,
            "run_id": ev.run_id,
            "event_index": ev.offset,
            **fields,
        }
        return frame(data, name, ev.position)

    def _step_fields(self, path: str) -> dict[str, Any]:
        node = self.nodes.get(name_of(path), {})
        fields: dict[str, Any] = {"step_name": name_of(path), "step_id": path}
        if "index" in node:
            fields["step_index"] = step_index(node["index"])
        if node.get("parent"):
            fields["parent_step_id"] = node["parent"]
        return fields

    def render(self, ev: Event) -> list[str]:
        self.workflow_id, self.workflow_run_id = ev.agent_id, ev.run_id
        data, meta = ev.data, ev.data.get("metadata") or {}
        if ev.type is EventType.RUN_STARTED:
            return [] if meta.get("continued") else [self._base(ev, "WorkflowStarted")]
        if ev.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED):
            return self._step(ev, meta)
        if ev.type is EventType.CUSTOM:
            return self._custom(ev)
        if ev.type is EventType.SUBAGENT_STARTED:
            child = data.get("subagent_run_id", "")
            self.steps_of[child] = str(data.get("parent_tool_call_id", "")).removeprefix("step:")
            if self.watching is not None:  # from here on its log is read along with the workflow's
                self.watching.last[child] = self.shown.get(child, -1)
            return []
        if ev.type in (EventType.SUBAGENT_FINISHED, EventType.SUBAGENT_ERROR):
            return self._child(ev)
        if ev.type is EventType.RUN_FINISHED:
            return [self._finished(ev)]
        if ev.type is EventType.RUN_ERROR:
            self.finished = True
            return [self._base(ev, "WorkflowError", error=data.get("message", ""), error_type=data.get("code"))]
        return []

    def _step(self, ev: Event, meta: dict[str, Any]) -> list[str]:
        path = meta.get("workflow_step")
        if not isinstance(path, str) or meta.get("reopened") or any(meta.get(k) for k in NOT_DONE):
            return []
        if ev.type is EventType.STEP_STARTED:
            return [self._base(ev, "StepStarted", **self._step_fields(path))]
        content = self.outputs.get(path)
        node = self.nodes.get(name_of(path), {})
        run_id = child_run_id(ev.run_id, f"step:{path}") if node.get("executor") == "agent" else None
        return [
            self._base(
                ev,
                "StepCompleted",
                **self._step_fields(path),
                content=content,
                content_type=_content_type(content),
                step_response=step_output(node, path, content, run_id),
            )
        ]

    def _custom(self, ev: Event) -> list[str]:
        name, value = ev.data.get("name"), ev.data.get("value") or {}
        if name == "step_output":
            path = value.get("step", "")
            self.outputs[path] = value.get("output")
            node = self.nodes.get(name_of(path), {})
            if value.get("executor") != "function" or len(node.get("index", ())) != 1:
                return []  # AgentOS says StepOutput for a function step at the top of the plan only
            fields = self._step_fields(path)
            return [self._base(ev, "StepOutput", **fields, step_output=step_output(node, path, value.get("output")))]
        if name != "workflow_node":
            return []
        kind = NODE_EVENTS.get((str(value.get("type")), str(value.get("phase"))))
        if kind is None:
            return []
        fields = self._step_fields(value.get("node", ""))
        extra = {k: value[k] for k in ("condition_result", "branch", "selected_steps", "iteration") if k in value}
        extra.update({k: value[k] for k in ("max_iterations", "should_continue", "total_iterations") if k in value})
        if "count" in value:
            extra["parallel_step_count"] = value["count"]
        if value.get("phase") == "completed" and value.get("type") != "Loop":
            inner = [p for p in self.outputs if self.nodes.get(name_of(p), {}).get("parent") == value.get("name")]
            extra["step_results"] = [step_output(self.nodes[name_of(p)], p, self.outputs[p]) for p in inner]
        return [self._base(ev, kind, **fields, **extra)]

    def child_page(self, page: ChildPage) -> str:
        """New events of an agent step's run, read live along with the workflow's log."""
        child_id = page.run_id
        if child_id not in self.steps_of:
            return ""
        agent = self.nodes.get(name_of(self.steps_of[child_id]), {}).get("executor_name", "")
        # A child run's session is its own id (engine/children.py), as its log's info says.
        events = [Event.from_stored(offset, stored, child_id, child_id, agent) for offset, stored in page.entries]
        return "".join(self._shown(child_id, events))

    def _child(self, parent: Event) -> list[str]:
        """At the step's end: what the stream has not shown of its run (all of it when nothing was followed)."""
        child_id = parent.data.get("subagent_run_id", "")
        if self.watching is not None:
            self.watching.last.pop(child_id, None)
        return self._shown(child_id, self.child_log(child_id))

    def _shown(self, child_id: str, events: list[Event]) -> list[str]:
        """The child's run events after those shown, as AgentOS shows an agent step's run (with the step's and the
        workflow's ids)."""
        path = self.steps_of.get(child_id) or ""
        renderer = self.renderers.setdefault(child_id, AgentOSRenderer(None, self.confirm))
        after = self.shown.get(child_id, -1)
        step = {k: v for k, v in self._step_fields(path).items() if k != "parent_step_id"}
        ids = {"workflow_id": self.workflow_id, "workflow_run_id": self.workflow_run_id, **step}
        out: list[str] = []
        for ev in events:
            if ev.offset <= after:
                renderer.remember(ev)
                continue
            self.shown[child_id] = ev.offset
            rendered = renderer.render(ev)
            if rendered is not None:
                out.append(frame({**rendered, **ids}, rendered["event"]))
        return out

    def _finished(self, ev: Event) -> str:
        outcome = ev.data.get("outcome") or {}
        kind = outcome.get("type", "success")
        if kind == "interrupt":
            self.finished = True
            interrupts = outcome.get("interrupts") or []
            requirements = [
                {
                    "step_id": (i.get("metadata") or {}).get("run_id") and i.get("tool_call_id"),
                    "requires_confirmation": True,
                    "confirmation_message": i.get("message"),
                    "tool_execution": paused_tool(i),
                }
                for i in interrupts
            ]
            content = "; ".join(i.get("message") or "" for i in interrupts) or None
            return self._base(ev, "WorkflowPaused", status="PAUSED", step_requirements=requirements, content=content)
        self.finished = True
        if kind == "cancelled":
            return self._base(ev, "WorkflowCancelled", reason="stopped", content="run cancelled")
        result = ev.data.get("result")
        results = [step_output(self.nodes.get(name_of(p), {}), p, out) for p, out in self.outputs.items()]
        return self._base(
            ev,
            "WorkflowCompleted",
            content=result,
            content_type=_content_type(result),
            step_results=results,
        )


def step_results(plan: list[dict[str, Any]], state: RunState) -> list[dict[str, Any]]:
    """The outputs of the steps that ran, as AgentOS's ``WorkflowRunOutput.step_results`` has them: one per node of
    the plan's top (a container with its steps' outputs in ``steps``), a loop's steps as of its last iteration."""
    progress = Progress.of(state.workflow)
    nodes = plan_index(plan)
    latest: dict[str, str] = {}
    for path in progress.order:
        latest[name_of(path)] = path

    def result(node: dict[str, Any]) -> dict[str, Any] | None:
        name = node["name"]
        info = nodes[name]
        if node["type"] == "Step":
            path = latest.get(name)
            if path is None:
                return None
            run_id = child_run_id(state.run_id, f"step:{path}") if info["executor"] == "agent" else None
            return step_output(info, path, progress.done[path], run_id)
        inner = [r for child in [*(node.get("steps") or []), *(node.get("else_steps") or [])] if (r := result(child))]
        if not inner:
            return None
        content = (
            as_text({r["step_name"]: r["content"] for r in inner})
            if node["type"] == "Parallel"
            else inner[-1]["content"]
        )
        return {**step_output(info, name, content), "steps": inner}

    return [r for node in plan if (r := result(node)) is not None]


def workflow_output(state: RunState, plan: list[dict[str, Any]], last_offset: int) -> dict[str, Any]:
    """A workflow run as AgentOS's ``WorkflowRunOutput`` JSON (the answer of a ``stream=false`` run)."""
    first = state.new_messages[0]["content"] if state.new_messages else ""
    paused = state.status.value == "paused"
    out: dict[str, Any] = {
        "run_id": state.run_id,
        "workflow_id": state.agent_id,
        "workflow_name": state.agent_id,
        "session_id": state.session_id,
        "user_id": state.user_id,
        "input": first if isinstance(first, str) else json.dumps(first),
        "status": AGNO_STATUS[state.status.value],
        "content": state.output,
        "content_type": _content_type(state.output),
        "created_at": state.created_at // 1000,
        "step_results": step_results(plan, state),
        "event_index": last_offset,
    }
    if paused:
        out["step_requirements"] = [{"step_id": c.id, "requires_confirmation": True} for c in state.pending]
    if state.error is not None:
        out["error"] = state.error.message
    return out
