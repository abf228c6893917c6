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
    #: The containers' phases their events announced already (``<path>:<phase>``).
    marks: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Progress:
        return cls(
            dict(data.get("done") or {}),
            dict(data.get("running") or {}),
            dict(data.get("decided") or {}),
            list(data.get("order") or []),
            dict(data.get("opened") or {}),
            list(data.get("marks") or []),
        )

    def to_json(self) -> dict[str, Any]:
        running = {"running": self.running, "opened": {p: self.opened[p] for p in self.running if p in self.opened}}
        return {"done": self.done, "decided": self.decided, "order": self.order, "marks": self.marks, **running}

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
    #: The path of the container it is in (a parallel, a loop ...; None at the top).
    parent: str | None = None


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
    #: Containers that entered a phase on this walk (the first time in the run): the values of their CUSTOM
    #: ``workflow_node`` events (``node``, ``name``, ``type``, ``phase``, ``index`` and the phase's facts).
    marks: list[dict[str, Any]] = field(default_factory=list)


class _Stop(Exception):
    """A decision failed: the walk ends with the error."""


@dataclass(frozen=True)
class _Place:
    """Where a node is: the iterations of the loops around it, its positions, and the container it is in."""

    scope: tuple[int, ...] = ()
    index: tuple[int, ...] = ()
    parent: str | None = None

    def at(self, i: int) -> _Place:
        return _Place(self.scope, (*self.index, i), self.parent)

    def inside(self, path: str, iteration: int | None = None) -> _Place:
        scope = self.scope if iteration is None else (*self.scope, iteration)
        return _Place(scope, self.index, path)


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

    def mark(self, node: Node, path: str, place: _Place, phase: str, **extra: Any) -> None:
        """A container's phase (``started``, ``completed``, a loop's ``iteration_started`` ...), once per run."""
        key = f"{path}:{phase}" + (f":{extra['iteration']}" if "iteration" in extra else "")
        if key in self.progress.marks:
            return
        self.progress.marks.append(key)
        value = {"node": path, "name": node.name, "type": node.kind, "phase": phase, "index": _index(place.index)}
        if place.parent is not None:
            value["parent"] = place.parent
        self.frontier.marks.append({**value, **extra})

    def seq(self, nodes: list[Node], place: _Place, prev: Any) -> tuple[bool, Any]:
        for i, node in enumerate(nodes):
            ended, prev = self.node(node, place.at(i), prev)
            if not ended:
                return False, None
        return True, prev

    def node(self, node: Node, place: _Place, prev: Any) -> tuple[bool, Any]:
        assert node.name is not None
        if isinstance(node, Step):
            return self.step(node, place, prev)
        path = path_of(node.name, place.scope)
        if isinstance(node, Parallel):
            self.mark(node, path, place, "started", count=len(node.steps))
            inner = place.inside(path)
            results = [self.node(n, inner.at(i), prev) for i, n in enumerate(node.steps)]
            if not all(ended for ended, _ in results):
                return False, None
            self.mark(node, path, place, "completed", count=len(node.steps))
            return True, {n.name: out for n, (_, out) in zip(node.steps, results, strict=True)}
        if isinstance(node, Condition):
            if path not in self.progress.decided:
                answer = self.decide("Condition", node.name, node.when, self.input(node.name, prev, place.scope))
                self.progress.decided[path] = bool(answer)
            result = self.progress.decided[path]
            self.mark(node, path, place, "started", condition_result=result)
            chosen = node.steps if result else node.else_steps
            ended, out = self.seq(chosen, place.inside(path), prev) if chosen else (True, prev)
            if ended:
                branch = "if" if result else ("else" if chosen else None)
                self.mark(node, path, place, "completed", condition_result=result, branch=branch)
            return ended, out
        if isinstance(node, Router):
            if path not in self.progress.decided:
                answer = self.decide("Router", node.name, node.choose, self.input(node.name, prev, place.scope))
                self.progress.decided[path] = _chosen(node, answer)
            names = self.progress.decided[path]
            self.mark(node, path, place, "started", selected_steps=names)
            by_name = {c.name: c for c in node.choices}
            ended, out = self.seq([by_name[n] for n in names], place.inside(path), prev)
            if ended:
                self.mark(node, path, place, "completed", selected_steps=names)
            return ended, out
        assert isinstance(node, Loop)
        return self.loop(node, path, place, prev)

    def loop(self, node: Loop, path: str, place: _Place, prev: Any) -> tuple[bool, Any]:
        assert node.name is not None
        answers: list[bool] = self.progress.decided.setdefault(path, [])
        most = node.max_iterations
        self.mark(node, path, place, "started", max_iterations=most)
        for iteration in range(1, most + 1):
            self.mark(node, path, place, "iteration_started", iteration=iteration, max_iterations=most)
            ended, prev = self.seq(node.steps, place.inside(path, iteration), prev)
            if not ended:
                return False, None
            if iteration == len(answers) + 1 and iteration < most:
                given = self.input(node.name, prev, (*place.scope, iteration))
                stop = node.until is not None and self.decide("Loop", node.name, node.until, given)
                answers.append(bool(stop))
            last = iteration == most or answers[iteration - 1]
            self.mark(node, path, place, "iteration_completed", iteration=iteration, should_continue=not last)
            if last:
                self.mark(node, path, place, "completed", total_iterations=iteration, max_iterations=most)
                return True, prev
        return True, prev  # (not reached: the last iteration returns)

    def step(self, step: Step, place: _Place, prev: Any) -> tuple[bool, Any]:
        path = path_of(step.name or "", place.scope)
        if path in self.progress.done:
            self.outputs[step.name or ""] = self.progress.done[path]
            return True, self.progress.done[path]
        if path in self.progress.running:
            self.frontier.working.append(path)
            return False, None
        ready = Ready(step, path, place.index, self.input(step.name or "", prev, place.scope), place.parent)
        (self.frontier.agents if step.agent is not None else self.frontier.functions).append(ready)
        return False, None


def _index(index: tuple[int, ...]) -> str:
    """A place in the plan as events spell it: positions joined by dots (``1.0``: the first node of the second)."""
    return ".".join(map(str, index))


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
        ended, output = walker.seq(plan, _Place(), base.previous_output)
    except _Stop as exc:
        return Frontier(error=str(exc))
    walker.frontier.ended, walker.frontier.output = ended, output
    return walker.frontier
