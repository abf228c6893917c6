"""Agents and agents modules.

An :class:`Agent` is instructions, a model and tools. A module that defines ``Agent`` objects at module
level is an *agents module*; workers load it by name (``--agents pkg.module``) and publish each agent's
manifest to Redis so API processes can list agents without importing their code.
"""

from __future__ import annotations

import copy
import importlib
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from .errors import ConfigurationError
from .history import HistoryPolicy, LastTurns, Summarize
from .hooks import Hooks
from .output import OutputSpec, output_spec
from .tools import Tool

if TYPE_CHECKING:
    from .mcp import MCPTools
    from .models import Model

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: Adapters for agents of other frameworks (``agents_celery.contrib.pydantic_ai`` adds one at import): each maps a
#: module-level value to the Agent that runs it here, or None when the value is not one of its agents.
GUESTS: list[Callable[[object], Agent | None]] = []
#: Frameworks whose agents are served as they are, by the top-level package of the agent's class -> the integration
#: that adds their adapter to :data:`GUESTS`, imported when an agents module holds such a value (an agents module of
#: plain Agents SDK agents imports nothing of ours).
GUEST_PACKAGES: dict[str, str] = {"agents": "agents_celery.contrib.openai_agents"}
_QUEUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


class Agent:
    """An agent: instructions, an OpenAI-compatible model, and tools.

    Args:
        name: Unique name; runs address the agent by it (``/agents/<name>/runs``).
        instructions: The system prompt.
        model: An :class:`~agents_celery.models.OpenAIChat`, a ``ScriptedModel`` or any ``Model``.
        tools: Functions decorated with :func:`~agents_celery.tools.tool`, other agents as :meth:`as_tool` makes
            them (each call runs that agent as a child run), and :class:`~agents_celery.mcp.MCPTools`
            toolsets (the tools of an MCP server, listed once per run).
        description: Shown in ``GET /agents``.
        hooks: :class:`~agents_celery.hooks.Hooks` run around its steps, on the worker.
        queue: The Celery queue its steps go to (default: ``AGENTS_CELERY_QUEUE``). A worker started with
            ``agents-celery worker --agents <module>`` consumes the queues of the agents it serves.
        handoffs: Agents this one may hand the conversation to. Each is offered to the model as a tool,
            ``transfer_to_<name>``; when the model calls it, the run's next model turn (and every one after,
            until another handoff) uses that agent's instructions, model and tools. The run keeps its id,
            log and session; the handoff is a CUSTOM ``handoff`` event and the state's ``active_agent``.
        history: What of a long conversation goes into the prompt: :class:`~agents_celery.history.LastTurns` or
            :class:`~agents_celery.history.Summarize` (None: all of it). The stored history keeps every turn.
        output_type: The final answer's shape: a pydantic model class or a JSON Schema dict. The model is asked
            for it (``response_format`` ``json_schema``), each final answer is validated, a failed one is sent back
            to the model (``output_retries`` times), and the run's ``output`` is the validated JSON value
            (``Runtime.run`` returns the model's instance). A run's ``output_schema`` overrides it. See
            ``docs/output.md``.

    Raises:
        ConfigurationError: the name or queue is not valid, no model is given, ``history`` is not a history
            policy, or a tool, toolset or handoff is not of a kind it takes or clashes with another's name.
        OutputSchemaError: ``output_type`` is neither a pydantic model class nor a valid JSON Schema.
        PayloadTooLargeError: the ``output_type`` schema is too large.
    """

    #: An agent of another framework (a pydantic-ai agent) runs each step of its runs itself: the engine calls
    #: ``run_step(ctx)`` (a :class:`~agents_celery.engine.steps.StepContext`, returning a ``StepResult``) instead of
    #: a model turn or a tool step.
    guest: ClassVar[bool] = False
    #: A run of this agent waiting for its child runs is woken on the worker of the child that ended (its step runs
    #: there at once) rather than through the broker: a workflow, whose steps between its agents are short.
    wakes_inline: ClassVar[bool] = False
    #: The history policy (see ``history`` above); a class default too, for subclasses that set their own up.
    history: HistoryPolicy | None = None
    #: What the final answer must be (see ``output_type`` above; None: plain text); a class default too.
    output: OutputSpec | None = None

    def run_step(self, ctx: Any) -> Any:
        """A guest agent's step (see :attr:`guest`); our own agents have none."""
        raise NotImplementedError(f"agent {self.name!r} is not a guest agent")

    def __init__(
        self,
        name: str,
        instructions: str = "",
        model: Model | None = None,
        tools: Sequence[Tool | MCPTools] = (),
        description: str = "",
        hooks: Sequence[Hooks] = (),
        queue: str | None = None,
        handoffs: Sequence[Agent] = (),
        history: HistoryPolicy | None = None,
        output_type: Any = None,
    ) -> None:
        if not _NAME.match(name):
            raise ConfigurationError(f"agent name {name!r} must be 1-64 letters, digits, '_', '-' or '.'")
        if model is None:
            raise ConfigurationError(f"agent {name!r} needs a model, e.g. OpenAIChat('gpt-4o-mini')")
        self.name = name
        self.instructions = instructions
        self.model = model
        self.description = description
        self.hooks = list(hooks)
        if queue is not None and not _QUEUE.match(queue):
            raise ConfigurationError(
                f"agent {name!r}: queue {queue!r} must be 1-128 letters, digits, '_', '-', '.' or ':'"
            )
        self.queue = queue
        if history is not None and not isinstance(history, (LastTurns, Summarize)):
            raise ConfigurationError(
                f"agent {name!r}: history must be LastTurns(...) or Summarize(...), got {history!r}"
            )
        self.history = history
        self.output_type = output_type
        self.output = output_spec(output_type)
        self.tools: dict[str, Tool] = {}
        #: MCP toolsets: their tools join ``tools`` per run, from the listing the run recorded.
        self.toolsets: list[MCPTools] = []
        for t in tools:
            if not isinstance(t, Tool):
                self._add_toolset(t)
                continue
            if t.name in self.tools:
                raise ConfigurationError(f"agent {name!r} has two tools named {t.name!r}")
            self.tools[t.name] = t
        #: Handoff tool name -> the agent it hands to.
        self.handoffs: dict[str, Agent] = {}
        for other in handoffs:
            if not isinstance(other, Agent):
                raise ConfigurationError(f"agent {name!r}: handoffs must be Agent objects, got {other!r}")
            tool_name = handoff_tool(other.name)
            if tool_name in self.tools or tool_name in self.handoffs:
                raise ConfigurationError(f"agent {name!r}: a tool is already named {tool_name!r}")
            self.handoffs[tool_name] = other

    def _add_toolset(self, toolset: Any) -> None:
        from .mcp import MCPTools

        if not isinstance(toolset, MCPTools):
            raise ConfigurationError(
                f"agent {self.name!r}: tools must be @tool functions, agents' as_tool() or MCPTools; got {toolset!r}"
            )
        if any(other.name == toolset.name for other in self.toolsets):
            raise ConfigurationError(f"agent {self.name!r} has two MCP toolsets named {toolset.name!r}; pass name=...")
        self.toolsets.append(toolset)

    def for_run(self, listings: Mapping[str, Mapping[str, Any]]) -> Agent:
        """This agent as a run sees it: its own tools, then the tools its MCP toolsets' recorded listings name.

        A toolset with no listing adds none. A tool of the agent's own, or a handoff, wins a clash of names. The
        agent itself is left as it is.

        Args:
            listings: The tool listing each MCP toolset recorded for the run, by toolset name.

        Returns:
            This agent when it has no toolsets, else a copy with the listed tools added.
        """
        if not self.toolsets:
            return self
        view = copy.copy(self)
        view.tools = dict(self.tools)
        for toolset in self.toolsets:
            listing = listings.get(toolset.name)
            for t in toolset.tools(listing) if listing else []:
                if t.name not in view.tools and t.name not in self.handoffs:
                    view.tools[t.name] = t
        return view

    def manifest(self) -> dict[str, Any]:
        """What workers publish: name, description, model, tools and which need confirmation, and each MCP toolset
        with the tools it last served in this process."""
        return {
            "name": self.name,
            "description": self.description,
            "model": getattr(self.model, "name", type(self.model).__name__),
            "tools": [t.manifest() for t in self.tools.values()],
            "queue": self.queue,
            "handoffs": [other.name for other in self.handoffs.values()],
            "toolsets": [ts.manifest() for ts in self.toolsets],
            "output_schema": self.output.schema if self.output is not None else None,
        }

    def as_tool(self, name: str | None = None, description: str | None = None) -> AgentTool:
        """This agent as a tool of another: each call runs it as a durable **child run** with the call's
        ``input`` as its message, and the child's final answer is the call's result.

        The child has its own run id (derived from the parent run and the call, so a retried step finds the
        same child), log and leases; the parent's tool step does not hold a worker while it runs.

        Args:
            name: The tool's name (default: the agent's, with the characters OpenAI refuses turned into ``_``).
            description: The tool's description (default: the agent's, else "Ask the agent ...").

        Returns:
            The tool, to give another agent in its ``tools``.

        Raises:
            ConfigurationError: the name is not a valid OpenAI function name.
        """
        return AgentTool(self, name, description)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools in Chat Completions ``tools`` form."""
        own = [t.openai_schema() for t in self.tools.values()]
        return own + [_handoff_schema(tool_name, other) for tool_name, other in self.handoffs.items()]

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, tools={list(self.tools)!r})"


class AgentTool(Tool):
    """A tool that runs an agent as a child run (:meth:`Agent.as_tool`). Workers never call its function: the
    tool step starts the child run, and a later tool step collects its answer."""

    def __init__(self, agent: Agent, name: str | None = None, description: str | None = None) -> None:
        def ask(input: str) -> str:
            """Ask the agent.

            Args:
                input: The request for the agent, with everything it needs to know (it sees nothing else).
            """
            raise ConfigurationError(f"agent tool {self.name!r} runs as a child run on the workers; it is not called")

        about = description if description is not None else (agent.description or f"Ask the agent {agent.name!r}.")
        super().__init__(ask, name=name or re.sub(r"[^A-Za-z0-9_-]", "_", agent.name), description=about)
        self.agent = agent

    def manifest(self) -> dict[str, Any]:
        return {**super().manifest(), "agent": self.agent.name}


def handoff_tool(agent_name: str) -> str:
    """The name of the tool that hands a conversation to ``agent_name``."""
    return "transfer_to_" + re.sub(r"[^A-Za-z0-9_-]", "_", agent_name)[:52]


def _handoff_schema(tool_name: str, other: Agent) -> dict[str, Any]:
    about = f": {other.description}" if other.description else ""
    return {
        "type": "function",
        "function": {
            "name": tool_name,
            "description": f"Hand the conversation to the agent {other.name!r}{about}",
            "parameters": {"type": "object", "properties": {"reason": {"type": "string"}}},
        },
    }


def agents_in(module: object) -> list[Agent]:
    """The module-level Agent objects of ``module``, in definition order."""
    found: list[Agent] = []
    for value in vars(module).values():
        if not isinstance(value, Agent):
            value = _guest(value)
        if isinstance(value, Agent) and value not in found:
            found.append(value)
    return found


def _guest(value: object) -> Agent | None:
    """The Agent that serves ``value``, an agent of another framework (None for anything else); the framework's
    integration is imported the first time one of its agents is met (:data:`GUEST_PACKAGES`)."""
    adapted = next((a for adapt in GUESTS if (a := adapt(value)) is not None), None)
    if adapted is not None or isinstance(value, type):
        return adapted
    integration = GUEST_PACKAGES.get(type(value).__module__.partition(".")[0])
    if integration is None or integration in sys.modules:
        return None
    try:
        importlib.import_module(integration)
    except ImportError:  # a package of that name that is not the framework (or the extra is missing)
        return None
    return next((a for adapt in GUESTS if (a := adapt(value)) is not None), None)


def load_agents(module_names: str | Sequence[str]) -> dict[str, Agent]:
    """Import agents modules and return their agents by name, in order.

    The agents they hand off to, or run as tools, are among them.

    Args:
        module_names: The modules' import names, comma-separated or as a list.

    Returns:
        Each agent by its name.

    Raises:
        ConfigurationError: a module cannot be imported or defines no Agent at module level, or two agents share a
            name.
    """
    names = [n.strip() for n in module_names.split(",")] if isinstance(module_names, str) else list(module_names)
    registry: dict[str, Agent] = {}
    for name in filter(None, names):
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            raise ConfigurationError(f"cannot import agents module {name!r}: {type(exc).__name__}: {exc}") from exc
        agents = agents_in(module)
        if not agents:
            raise ConfigurationError(f"agents module {name!r} defines no Agent at module level")
        for agent in agents:
            _register(registry, agent)
    return registry


def _register(registry: dict[str, Agent], agent: Agent) -> None:
    """Add ``agent`` and the agents it hands off to (a worker serves the whole chain)."""
    if agent.name in registry:
        if registry[agent.name] is not agent:
            raise ConfigurationError(f"two agents are named {agent.name!r}")
        return
    registry[agent.name] = agent
    for other in agent.handoffs.values():
        _register(registry, other)
    for t in agent.tools.values():
        if isinstance(t, AgentTool):
            _register(registry, t.agent)
