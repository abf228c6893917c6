"""Where a workflow run stands: its :class:`Progress` (kept in the run's state), and :func:`walk`, which goes through
the plan from the start with it and finds what can run now. No I/O.

Each step is known by its *path*: its name, and the iterations of the loops around it (``write@2``; nested loops
``check@2.1``). The progress holds each finished step's output by path, the agent steps whose child runs are
working, and the decisions taken so far (a condition's answer, a router's choice, a loop's answer after each
iteration). A walk replays those decisions and takes the ones now due (it calls ``when``, ``until`` and
``choose``; their answers join the progress and are committed with the step), so every walk of a run takes the
same way through the plan. It ends with a :class:`Frontier`: the function steps ready to run, the agent steps
ready to start, those still working, and the workflow's output once every node ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .plan import Condition, Loop, Node, Parallel, Router, Step, StepInput


@dataclass
class Progress:
    """Where a run stands in its plan (the JSON of ``RunState.workflow``)."""

    #: Finished steps: path -> output.
    done: dict[str, Any] = field(default_factory=dict)
    #: Agent steps whose child run works: path -> child run id.
    running: dict[str, str] = field(default_factory=dict)
    #: Decisions taken: a condition's path -> bool, a router's -> the names chosen, a loop's -> its answers so far.
    decided: dict[str, Any] = field(default_factory=dict)
    #: Paths in the order their steps finished.
    order: list[str] = field(default_factory=list)
    #: Agent steps: path -> the run's step number that started them (a retried attempt of that step opens their
    #: STEP_STARTED again: the engine closed what the crashed attempt opened).
    opened: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Progress:
        return cls(
            dict(data.get("done") or {}),
            dict(data.get("running") or {}),
            dict(data.get("decided") or {}),
            list(data.get("order") or []),
            dict(data.get("opened") or {}),
        )

    def to_json(self) -> dict[str, Any]:
        running = {"running": self.running, "opened": {p: self.opened[p] for p in self.running if p in self.opened}}
        return {"done": self.done, "decided": self.decided, "order": self.order, **running}

    def finish(self, path: str, output: Any) -> None:
        self.running.pop(path, None)
        self.done[path] = output
        self.order.append(path)


def path_of(name: str, scope: tuple[int, ...]) -> str:
    """A step's path: its name, and the iterations of the loops around it."""
    return name if not scope else f"{name}@{'.'.join(map(str, scope))}"


def name_of(path: str) -> str:
    """The step name of a path."""
    return path.partition("@")[0]


@dataclass(frozen=True)
class Ready:
    """A step that can run now: the step, its path, its place in the plan (``index``: positions, outermost
    first) and its input."""

    step: Step
    path: str
    index: tuple[int, ...]
    input: StepInput


@dataclass
class Frontier:
    """What a walk found: steps ready to run, agent steps working, and the output once the workflow ended."""

    functions: list[Ready] = field(default_factory=list)
    agents: list[Ready] = field(default_factory=list)
    #: Paths of agent steps whose child run is working.
    working: list[str] = field(default_factory=list)
    ended: bool = False
    output: Any = None
    #: Why the workflow cannot go on (a ``when``, ``until`` or ``choose`` that raised or answered nonsense).
    error: str | None = None


class _Stop(Exception):
    """A decision failed: the walk ends with the error."""


class _Walker:
    def __init__(self, progress: Progress, base: StepInput) -> None:
        self.progress = progress
        self.base = base
        self.frontier = Frontier()
        #: The outputs seen so far on the way, by step name (the latest).
        self.outputs: dict[str, Any] = {}

    def input(self, name: str, prev: Any, scope: tuple[int, ...]) -> StepInput:
        return replace(
            self.base,
            previous_output=prev,
            outputs=dict(self.outputs),
            step_name=name,
            iteration=scope[-1] if scope else 0,
        )

    def decide(self, kind: str, name: str, fn: Any, given: StepInput) -> Any:
        try:
            return fn(given)
        except Exception as exc:  # the user's function: the workflow cannot go on
            raise _Stop(f"{kind} {name!r} raised {type(exc).__name__}: {exc}") from None

    def seq(self, nodes: list[Node], scope: tuple[int, ...], index: tuple[int, ...], prev: Any) -> tuple[bool, Any]:
        for i, node in enumerate(nodes):
            ended, prev = self.node(node, scope, (*index, i), prev)
            if not ended:
                return False, None
        return True, prev

    def node(self, node: Node, scope: tuple[int, ...], index: tuple[int, ...], prev: Any) -> tuple[bool, Any]:
        assert node.name is not None
        if isinstance(node, Step):
            return self.step(node, scope, index, prev)
        if isinstance(node, Parallel):
            results = [self.node(n, scope, (*index, i), prev) for i, n in enumerate(node.steps)]
            if not all(ended for ended, _ in results):
                return False, None
            return True, {n.name: out for n, (_, out) in zip(node.steps, results, strict=True)}
        path = path_of(node.name, scope)
        if isinstance(node, Condition):
            if path not in self.progress.decided:
                answer = self.decide("Condition", node.name, node.when, self.input(node.name, prev, scope))
                self.progress.decided[path] = bool(answer)
            chosen = node.steps if self.progress.decided[path] else node.else_steps
            return self.seq(chosen, scope, index, prev) if chosen else (True, prev)
        if isinstance(node, Router):
            if path not in self.progress.decided:
                answer = self.decide("Router", node.name, node.choose, self.input(node.name, prev, scope))
                self.progress.decided[path] = _chosen(node, answer)
            by_name = {c.name: c for c in node.choices}
            return self.seq([by_name[n] for n in self.progress.decided[path]], scope, index, prev)
        assert isinstance(node, Loop)
        return self.loop(node, path, scope, index, prev)

    def loop(
        self, node: Loop, path: str, scope: tuple[int, ...], index: tuple[int, ...], prev: Any
    ) -> tuple[bool, Any]:
        assert node.name is not None
        answers: list[bool] = self.progress.decided.setdefault(path, [])
        for iteration in range(1, node.max_iterations + 1):
            ended, prev = self.seq(node.steps, (*scope, iteration), index, prev)
            if not ended:
                return False, None
            if iteration == len(answers) + 1 and iteration < node.max_iterations:
                given = self.input(node.name, prev, (*scope, iteration))
                stop = node.until is not None and self.decide("Loop", node.name, node.until, given)
                answers.append(bool(stop))
            if iteration == node.max_iterations or answers[iteration - 1]:
                return True, prev
        return True, prev  # (not reached: the last iteration returns)

    def step(self, step: Step, scope: tuple[int, ...], index: tuple[int, ...], prev: Any) -> tuple[bool, Any]:
        path = path_of(step.name or "", scope)
        if path in self.progress.done:
            self.outputs[step.name or ""] = self.progress.done[path]
            return True, self.progress.done[path]
        if path in self.progress.running:
            self.frontier.working.append(path)
            return False, None
        ready = Ready(step, path, index, self.input(step.name or "", prev, scope))
        (self.frontier.agents if step.agent is not None else self.frontier.functions).append(ready)
        return False, None


def _chosen(router: Router, answer: Any) -> list[str]:
    """The names a router's ``choose`` answered (a node or a name, or a list of them), each one of its choices."""
    items = answer if isinstance(answer, list | tuple) else [answer]
    names = sorted(str(c.name) for c in router.choices)
    out: list[str] = []
    for item in items:
        name = item.name if isinstance(item, Node) else item
        if not isinstance(name, str) or name not in names:
            raise _Stop(f"Router {router.name!r} chose {name!r}, which is not one of its choices {names}")
        out.append(name)
    if not out:
        raise _Stop(f"Router {router.name!r} chose nothing")
    return out


def walk(plan: list[Node], progress: Progress, base: StepInput) -> Frontier:
    """Go through a workflow's ``plan`` with ``progress`` (decisions due are taken and added to it): what can run now.
    ``base``: the input every step's starts from (the run's message and ids; ``previous_output`` the message)."""
    walker = _Walker(progress, base)
    try:
        ended, output = walker.seq(plan, (), (), base.previous_output)
    except _Stop as exc:
        return Frontier(error=str(exc))
    walker.frontier.ended, walker.frontier.output = ended, output
    return walker.frontier
