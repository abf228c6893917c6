"""The vocabulary of workflows: :class:`Step`, :class:`Parallel`, :class:`Condition`, :class:`Loop` and :class:`Router`,
and :class:`Router`, and the plan they describe (JSON, as manifests publish it).

A workflow is a list of nodes run in order, each node's output the next one's input. A :class:`Step` runs an agent
(a child run of the workflow's run: its message is the previous output, or a template of it) or a function (called
with a :class:`StepInput`, through the effect ledger, once). :class:`Parallel` runs its nodes at once, its output the
outputs by node name; :class:`Condition` runs its steps when ``when(input)`` is true; :class:`Loop` runs its steps
again until ``until(input)`` is true, at most ``max_iterations`` times; :class:`Router` runs the choices
``choose(input)`` names. Every node has a name, unique in its workflow (it keys the step's output and its events);
the containers get one from their place when none is given (``parallel-1``, ``loop-2`` ...).

:class:`~.workflow.Workflow` holds a plan and serves it like an agent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

from ..agent import GUESTS, Agent, AgentTool
from ..errors import ConfigurationError

#: Step and node names: they name tools, events and outputs (OpenAI's rule for function names).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
#: The most iterations a :class:`Loop` may be given (a bound is required: a loop never runs forever).
MAX_ITERATIONS = 1000


@dataclass(frozen=True)
class StepInput:
    """What a function step (and a ``when``, ``until`` or ``choose``) is given.

    Attributes:
        message: The workflow run's message (its text).
        previous_output: The output of the node before (the message, for the first).
        outputs: The outputs of the steps that ran so far, by step name (the latest, in a loop).
        session_id: The workflow run's session.
        run_id: The workflow run's id.
        step_name: The step (or node) being given this input.
        iteration: The iteration of the innermost loop around it (1 for the first; 0 outside loops).
        idempotency_key: A function step's key, ``<run id>:<step path>``, the same for every attempt: pass it to
            an external API so a call repeated after a crash is recognised there.
    """

    message: str
    previous_output: Any
    outputs: dict[str, Any] = field(default_factory=dict)
    session_id: str = ""
    run_id: str = ""
    step_name: str = ""
    iteration: int = 0
    idempotency_key: str = ""

    @property
    def previous_text(self) -> str:
        """The previous output as text (JSON for anything but a string; a parallel's outputs as sections)."""
        return as_text(self.previous_output)


def as_text(value: Any) -> str:
    """An output as an agent step's message sees it: text as it is, a parallel's outputs (a dict by name) as
    ``### name`` sections, anything else as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, dict) and value and all(isinstance(v, str) for v in value.values()):
        return "\n\n".join(f"### {name}\n\n{text}" for name, text in value.items())
    return json.dumps(value, ensure_ascii=False, default=str)


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(f"{what} name {name!r} must be 1-64 letters, digits, '_' or '-'")
    return name


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _as_agent(value: object) -> Agent:
    """An agent of ours, or an agent of another framework as a guest (a pydantic-ai agent)."""
    if isinstance(value, Agent):
        return value
    adapted = next((a for adapt in GUESTS if (a := adapt(value)) is not None), None)
    if adapted is None:
        raise ConfigurationError(f"a step's agent must be an Agent (or a guest framework's agent); got {value!r}")
    return adapted


class Node:
    """A node of a workflow's plan (see the module docs)."""

    #: The node's type as the plan spells it (Agno's ``StepType`` names).
    kind: ClassVar[str] = "Node"

    name: str | None

    def children(self) -> Iterator[Node]:
        """The nodes inside this one (none for a step)."""
        return iter(())

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError


def nodes_of(value: object, owner: str) -> list[Node]:
    """A list of nodes: a node alone counts as a list of one."""
    items = [value] if isinstance(value, Node) else list(value)  # type: ignore[call-overload]
    for item in items:
        if not isinstance(item, Node):
            raise ConfigurationError(f"{owner}: steps must be Step, Parallel, Condition, Loop or Router; got {item!r}")
    return items


class Step(Node):
    """A step: an agent run as a child run, or a function called once through the effect ledger.

    Args:
        name: The step's name (default: the agent's, or the function's ``__name__``).
        agent: An :class:`~agents_celery.Agent` (or a guest agent, a pydantic-ai one): its run's message is the
            previous output (``message`` shapes it), its final answer the step's output.
        function: A callable taking a :class:`StepInput` and returning text or a JSON value (a pydantic model is
            dumped). It runs on a worker through the effect ledger: a retried step uses its recorded result, and one
            that may have run in an attempt that crashed pauses the workflow (``may_have_run``) unless ``idempotent``.
        message: For an agent step: a template (``str.format`` with ``message``, ``previous_output`` and
            ``outputs``: ``"Write about {previous_output}"``) or a callable taking a StepInput.
        idempotent: The function may run again after a crash without asking anyone.
        timeout: Seconds a function step may take before it is abandoned (the workflow fails with that reason).
        description: Shown in the plan.
    """

    kind = "Step"

    def __init__(
        self,
        name: str | None = None,
        agent: object = None,
        function: Callable[[StepInput], Any] | None = None,
        *,
        message: str | Callable[[StepInput], str] | None = None,
        idempotent: bool = False,
        timeout: float | None = None,
        description: str = "",
    ) -> None:
        if (agent is None) == (function is None):
            raise ConfigurationError(f"step {name!r} needs an agent or a function (one of them)")
        self.agent = _as_agent(agent) if agent is not None else None
        if function is not None and not callable(function):
            raise ConfigurationError(f"step {name!r}: function must be callable, got {function!r}")
        self.function = function
        default = self.agent.name if self.agent is not None else getattr(function, "__name__", None)
        self.name = _check_name(name if name is not None else default, "step")
        if message is not None and (self.agent is None or not (isinstance(message, str) or callable(message))):
            raise ConfigurationError(f"step {self.name!r}: message is a template (str) or a callable of an agent step")
        self.message = message
        self.idempotent = idempotent
        if timeout is not None and not timeout > 0:
            raise ConfigurationError(f"step {self.name!r}: timeout must be a positive number of seconds")
        self.timeout = timeout
        self.description = description or (self.agent.description if self.agent is not None else "")

    @cached_property
    def tool(self) -> AgentTool:
        """The agent tool an agent step's child runs start as, built once (its arguments' pydantic model is the
        costly part: building it per step was a seventh of a 3-agent workflow's worker CPU)."""
        assert self.agent is not None
        return AgentTool(self.agent, name=self.name)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "description": self.description, "type": self.kind}
        if self.agent is not None:
            out.update(executor="agent", agent={"id": self.agent.name, "name": self.agent.name})
        else:
            assert self.function is not None
            out.update(executor="function", function=_qualname(self.function), idempotent=self.idempotent)
        return out

    def __repr__(self) -> str:
        what = f"agent={self.agent.name!r}" if self.agent is not None else f"function={self.function!r}"
        return f"Step({self.name!r}, {what})"


class Parallel(Node):
    """Nodes run at once (agent steps as child runs side by side, function steps on threads of the step's
    worker); its output is their outputs by name, and it ends when all of them ended.

    Args:
        steps: The nodes (each a branch).
        name: Its name (default: ``parallel-<n>``, from its place).
    """

    kind = "Parallel"

    def __init__(self, *steps: Node, name: str | None = None) -> None:
        self.steps = nodes_of(steps, f"Parallel {name or ''}".strip())
        if not self.steps:
            raise ConfigurationError("Parallel needs at least one step")
        self.name = None if name is None else _check_name(name, "Parallel")

    def children(self) -> Iterator[Node]:
        return iter(self.steps)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.kind, "steps": [s.describe() for s in self.steps]}


class Condition(Node):
    """Steps run only when ``when(input)`` is true (else ``else_steps``, if any; else the input passes on).

    Args:
        when: Takes a :class:`StepInput` (``previous_output``: the output before it), returns whether to run ``steps``.
        steps: The nodes run when it is true.
        else_steps: The nodes run when it is false (none: nothing runs, the input passes on).
        name: Its name (default: ``condition-<n>``).
    """

    kind = "Condition"

    def __init__(
        self,
        when: Callable[[StepInput], bool],
        steps: Node | Sequence[Node],
        *,
        else_steps: Node | Sequence[Node] = (),
        name: str | None = None,
    ) -> None:
        if not callable(when):
            raise ConfigurationError(f"Condition: when must be callable, got {when!r}")
        self.when = when
        self.steps = nodes_of(steps, "Condition")
        self.else_steps = nodes_of(else_steps, "Condition")
        if not self.steps:
            raise ConfigurationError("Condition needs at least one step")
        self.name = None if name is None else _check_name(name, "Condition")

    def children(self) -> Iterator[Node]:
        yield from self.steps
        yield from self.else_steps

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.kind, "when": _qualname(self.when)}
        out["steps"] = [s.describe() for s in self.steps]
        if self.else_steps:
            out["else_steps"] = [s.describe() for s in self.else_steps]
        return out


class Loop(Node):
    """Steps run again and again: after each iteration ``until(input)`` (its ``previous_output`` the iteration's
    output) says whether to stop; it stops anyway after ``max_iterations``. No ``until``: exactly that many.

    Args:
        steps: The nodes of an iteration (each iteration's steps are told apart by their path: ``grow@2``).
        until: Takes a :class:`StepInput` (``iteration``: the one that ended), returns whether to stop.
        max_iterations: The bound, 1 to 1000.
        name: Its name (default: ``loop-<n>``).
    """

    kind = "Loop"

    def __init__(
        self,
        steps: Node | Sequence[Node],
        until: Callable[[StepInput], bool] | None = None,
        max_iterations: int = 3,
        *,
        name: str | None = None,
    ) -> None:
        self.steps = nodes_of(steps, "Loop")
        if not self.steps:
            raise ConfigurationError("Loop needs at least one step")
        if until is not None and not callable(until):
            raise ConfigurationError(f"Loop: until must be callable, got {until!r}")
        if type(max_iterations) is not int or not 1 <= max_iterations <= MAX_ITERATIONS:
            raise ConfigurationError(f"Loop: max_iterations must be an integer from 1 to {MAX_ITERATIONS}")
        self.until = until
        self.max_iterations = max_iterations
        self.name = None if name is None else _check_name(name, "Loop")

    def children(self) -> Iterator[Node]:
        return iter(self.steps)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.kind, "max_iterations": self.max_iterations}
        if self.until is not None:
            out["until"] = _qualname(self.until)
        out["steps"] = [s.describe() for s in self.steps]
        return out


class Router(Node):
    """One (or several, in order) of ``choices`` run: those ``choose(input)`` returns (a node or its name, or a
    list of them).

    Args:
        choose: Takes a :class:`StepInput`, returns the choice (or choices) to run.
        choices: The nodes it may choose.
        name: Its name (default: ``router-<n>``).
    """

    kind = "Router"

    def __init__(self, choose: Callable[[StepInput], Any], choices: Sequence[Node], *, name: str | None = None) -> None:
        if not callable(choose):
            raise ConfigurationError(f"Router: choose must be callable, got {choose!r}")
        self.choose = choose
        self.choices = nodes_of(choices, "Router")
        if not self.choices:
            raise ConfigurationError("Router needs at least one choice")
        self.name = None if name is None else _check_name(name, "Router")

    def children(self) -> Iterator[Node]:
        return iter(self.choices)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.kind, "choose": _qualname(self.choose)}
        out["steps"] = [s.describe() for s in self.choices]
        return out


def walk_nodes(nodes: Sequence[Node]) -> Iterator[Node]:
    """Every node of ``nodes``, depth first, in plan order."""
    for node in nodes:
        yield node
        yield from walk_nodes(list(node.children()))
