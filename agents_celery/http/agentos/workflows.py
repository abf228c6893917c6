"""AgentOS's workflow routes: ``GET /workflows``, ``GET /workflows/<id>``, ``POST /workflows/<id>/runs`` (form or JSON:
``message``, ``stream``, ``session_id``, ``user_id``, ``background``), ``POST .../runs/<run_id>/continue`` and
``POST .../runs/<run_id>/cancel``, as Agno's ``RemoteWorkflow`` (``agno.client.AgentOSClient``) calls them.

A workflow run is a run: these routes start, continue and stop it through the Runtime, and its stream is its log
rendered by :class:`~.workflow_render.WorkflowPresenter`. ``stream=false`` answers the run's ``WorkflowRunOutput`` once
it ends or pauses (``status``, ``content``, ``step_results``); ``background=true`` answers 202 at once. A continue takes
our ``tools`` decisions (as ``/agents/.../continue`` does) or Agno's ``step_requirements``: each requirement's
``tool_execution`` (or its ``executor_requirements``' ``tool_execution``) with ``confirmed``, or a step's own
``step_id`` (``step:<path>``, a function step that may have run) with ``confirmed``; none approves every call waiting.
"""

from __future__ import annotations

from typing import Any

from ...content import check_parts
from ...errors import ForbiddenError, RunExpiredError, RunNotFoundError, UnknownAgentError
from ...runtime import Runtime
from ...workflows.workflow import is_workflow
from ..access import Access
from ..bodies import ContinueBody, Limits, RunBody, WorkflowContinueBody, parse
from ..messages import Reply, Request, Wait
from ..sse import LogStream
from ..uploads import message_of
from .render import AGNO_STATUS
from .workflow_render import WorkflowPresenter, workflow_output


def decisions_of(body: WorkflowContinueBody) -> list[dict[str, Any]]:
    """The decisions a continue body brings (none: approve every call waiting)."""
    if body.tools:
        return [t.decision() for t in body.tools]
    out: list[dict[str, Any]] = []
    for req in body.step_requirements or []:
        executions = [req.get("tool_execution")]
        executions += [(r or {}).get("tool_execution") for r in req.get("executor_requirements") or []]
        found = [e for e in executions if isinstance(e, dict) and e.get("tool_call_id")]
        for e in found:
            note = e.get("confirmation_note")
            out.append({"tool_call_id": e["tool_call_id"], "confirmed": e.get("confirmed") is not False, "note": note})
        if not found and isinstance(req.get("step_id"), str) and req["step_id"].startswith("step:"):
            out.append({"tool_call_id": req["step_id"], "confirmed": req.get("confirmed") is not False})
    return out


class WorkflowsEndpoint:
    """The workflow routes over the API's Runtime and access checks (see the module docs)."""

    def __init__(
        self,
        runtime: Runtime,
        access: Access,
        limits: Limits,
        keepalive_seconds: float = 15.0,
        block_seconds: float = 600.0,
    ) -> None:
        self.runtime = runtime
        self.access = access
        self.limits = limits
        self.keepalive_seconds = keepalive_seconds
        self.block_seconds = block_seconds

    def manifest(self, workflow_id: str) -> dict[str, Any]:
        """A workflow's manifest; 404 for an agent or a name nobody serves."""
        try:
            manifest = self.runtime.agent_manifest(workflow_id)
        except UnknownAgentError:
            manifest = {}
        if not is_workflow(manifest):
            known = [m["name"] for m in self.runtime.agents() if is_workflow(m)]
            raise UnknownAgentError(f"no workflow named {workflow_id!r}; known workflows: {known}")
        return manifest

    def index(self, req: Request) -> Reply:
        self.access.allow(req, "list")
        workflows = [m for m in self.runtime.agents() if is_workflow(m)]
        return Reply(200, [{"id": m["name"], "name": m["name"], "description": m["description"]} for m in workflows])

    def get(self, req: Request, workflow_id: str) -> Reply:
        self.access.allow(req, "list", agent_id=workflow_id)
        m = self.manifest(workflow_id)
        return Reply(200, {"id": m["name"], "name": m["name"], "description": m["description"], "steps": m["steps"]})

    def create(self, req: Request, workflow_id: str) -> Reply:
        manifest = self.manifest(workflow_id)  # 404 before looking at the body
        self.access.allow(req, "start", agent_id=workflow_id)
        body = parse(req.body(), RunBody, limits=self.limits)
        message = message_of(body.message, req.files())
        check_parts(message, self.runtime.settings)
        user_id = req.user_id or body.user_id
        if req.user_id and body.user_id and body.user_id != req.user_id:
            raise ForbiddenError(f"you are user {req.user_id!r}: you may not start runs as {body.user_id!r}")
        self.access.session(req, body.session_id, "start", workflow_id)
        stream = self.runtime.stream(
            workflow_id,
            message,
            session_id=body.session_id,
            user_id=user_id,
            idempotency_key=req.headers.get("Idempotency-Key") or None,
            multitask_strategy=body.multitask_strategy,
        )
        return self._finish(req, stream.run_id, stream.session_id, -1, body, manifest)

    def continue_(self, req: Request, workflow_id: str, run_id: str) -> Reply:
        info = self.access.run(req, run_id, "continue", workflow_id)
        body = parse(req.body(), WorkflowContinueBody, ("tools", "step_requirements"), self.limits)
        if body.session_id and body.session_id != info.session_id:
            raise RunNotFoundError(f"run {run_id!r} is not in session {body.session_id!r}")
        before = self.runtime.store.log.info(run_id).last_offset  # the continue's RUN_STARTED comes right after
        self.runtime.continue_run(run_id, decisions_of(body) or None)
        return self._finish(req, run_id, info.session_id, before, body, self.manifest(workflow_id))

    def cancel(self, req: Request, workflow_id: str, run_id: str) -> Reply:
        self.access.run(req, run_id, "stop", workflow_id)
        view = self.runtime.stop(run_id, "stopped by request")
        return Reply(200, {"run_id": run_id, "status": view.status.value, "stop_requested": True})

    def _finish(
        self, req: Request, run_id: str, session_id: str, after: int, body: RunBody | ContinueBody, manifest: Any
    ) -> Reply:
        """SSE, 202, or (a Wait for) the run's WorkflowRunOutput once it ends or pauses."""
        plan = manifest["steps"]
        if body.stream:
            presenter = WorkflowPresenter(plan, self._child_log, self._confirm(manifest))
            stream = LogStream(
                run_id,
                after,
                "agentos",
                until_pause=True,
                keepalive_seconds=self.keepalive_seconds,
                presenter=presenter,
            )
            return Reply(200, stream=stream)
        if body.background:
            status = AGNO_STATUS[self.runtime.get(run_id).status.value]
            accepted = {"run_id": run_id, "session_id": session_id, "status": status}
            return Reply(202, accepted, headers={"Location": req.run_url(run_id)})

        def answer() -> Reply:
            state, _ = self.runtime.store.load(run_id)
            return Reply(200, workflow_output(state, plan, self.runtime.store.log.info(run_id).last_offset))

        return Reply(200, wait=Wait(run_id, after, self.block_seconds, answer=answer))

    def _child_log(self, run_id: str) -> list[Any]:
        try:
            return self.runtime.store.log.read(run_id, -1)
        except (RunNotFoundError, RunExpiredError):  # gone: nothing to show
            return []

    def _confirm(self, manifest: dict[str, Any]) -> frozenset[str]:
        """The tools of the workflow's agents that need a confirmation (their manifests, as workers published)."""
        names: set[str] = set()
        for tool in manifest.get("tools", []):
            agent = self.runtime.store.agents.get(tool["agent"]) if tool.get("agent") else None
            names |= {t["name"] for t in (agent or {}).get("tools", []) if t.get("requires_confirmation")}
        return frozenset(names)
