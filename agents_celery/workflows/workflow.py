"""The :class:`Workflow`: a plan of nodes (:mod:`.plan`) served like an agent: by name, on the workers that load its
module. A run of it is a run (its own log, offsets, session, owner, stop and retention) whose steps run through
:mod:`.runner`, loaded when a step first runs, so an agents module that defines workflows imports no engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..agent import Agent, AgentTool
from ..errors import ConfigurationError
from ..hooks import Hooks
from ..tools import Tool
from .plan import Node, Step, nodes_of, walk_nodes


class _Workflow:
    """What workflows are as agents' models: only a name (``GET /agents`` never shows it; the manifest says
    ``kind: workflow``)."""

    name = "workflow"


class FunctionStep(Tool):
    """A function step as decisions and interrupts see it: a tool of the workflow named like the step, with no
    parameters (a ``may_have_run`` pause names it); the engine never invokes it (the runner calls the function)."""

    def __init__(self, step: Step) -> None:
        def run() -> None:
            """A function step of the workflow."""

        super().__init__(run, name=step.name, description=step.description, idempotent=step.idempotent)


class Workflow(Agent):
    """A workflow: named steps run durably, one after another (see the module docs).

    Args:
        name: Unique among the agents and workflows served; runs address it by name (``/workflows/<name>/runs``).
        description: Shown in ``GET /workflows``.
        steps: The nodes, in order.
        queue: The Celery queue the workflow run's own steps go to (its agents' runs go to theirs).
        hooks: :class:`~agents_celery.hooks.Hooks` run around the workflow run's steps; a function step is a tool
            call to them (``before_tool_call`` / ``after_tool_call`` with the step's name).
    """

    guest = True
    wakes_inline = True

    def __init__(
        self,
        name: str,
        description: str = "",
        steps: Node | Sequence[Node] = (),
        *,
        queue: str | None = None,
        hooks: Sequence[Hooks] = (),
    ) -> None:
        nodes = nodes_of(steps, f"workflow {name!r}")
        if not nodes:
            raise ConfigurationError(f"workflow {name!r} needs at least one step")
        counts: dict[str, int] = {}
        seen: dict[str, Node] = {}
        for node in walk_nodes(nodes):
            if node.name is None:  # a container's name from its place (stable as long as the plan is)
                counts[node.kind] = counts.get(node.kind, 0) + 1
                node.name = f"{node.kind.lower()}-{counts[node.kind]}"
            if seen.get(node.name, node) is not node:
                raise ConfigurationError(f"workflow {name!r}: two nodes are named {node.name!r}; names must be unique")
            seen[node.name] = node
        steps_of = [n for n in seen.values() if isinstance(n, Step)]
        tools: list[Tool] = []
        for step in steps_of:  # the agents register (a worker serves them too); function steps name decisions
            tools.append(AgentTool(step.agent, name=step.name) if step.agent is not None else FunctionStep(step))
        model: Any = _Workflow()
        super().__init__(name, model=model, tools=tools, description=description, queue=queue, hooks=hooks)
        self.steps = nodes
        #: Every node by name.
        self.nodes: dict[str, Node] = seen

    def plan(self) -> list[dict[str, Any]]:
        """The steps as JSON (what ``GET /workflows/<name>`` shows)."""
        return [n.describe() for n in self.steps]

    def manifest(self) -> dict[str, Any]:
        return {**super().manifest(), "kind": "workflow", "steps": self.plan()}

    def run_step(self, ctx: Any) -> Any:
        """One step of a run of this workflow (:mod:`.runner`)."""
        from .runner import run_step

        return run_step(self, self.steps, ctx)

    def __repr__(self) -> str:
        return f"Workflow(name={self.name!r}, steps={[n.name for n in self.steps]!r})"


def is_workflow(manifest: dict[str, Any]) -> bool:
    """Whether a published manifest is a workflow's."""
    return manifest.get("kind") == "workflow"
