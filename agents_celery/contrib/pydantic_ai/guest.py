"""A pydantic-ai agent as an agent of ours: its manifest, and each step of its runs as one segment.

The run's ``messages`` hold pydantic-ai's message history (``ModelMessagesTypeAdapter`` JSON): the session's
history first (a session started by one of our own agents keeps its chat messages; user messages, their images and
files, and assistant text carry over), then this run's. A user message sent to the run (its first, or one sent while
it is live) is a chat message ``{"role": "user", ...}`` until the next segment takes it as its prompt, its images and
files as pydantic-ai user content (:mod:`.prompt`). A segment ends with the run (its output,
usage) or with a pause: for deferred tools (``requires_approval=True``, external calls), or for a call that may
have run in a crashed attempt; ``continue_run`` decisions become the next segment's ``DeferredToolResults``.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset

from ...agent import Agent
from ...content import refs_in, text_of
from ...engine.steps import StepContext, StepResult, completed, paused
from ...errors import ConfigurationError
from ...runs import RunState, ToolCall
from ..guests.agent import (
    ANSWERED,
    GuestTool,
    Journals,
    ModelName,
    drive,
    first_error,
    output_value,
    split_decided,
    with_may_have_run,
)
from .prompt import Prompt, restored, stored_form
from .segment import MayHaveRun, Segment

__all__ = ["ANSWERED", "GuestAgent", "GuestTool", "output_value"]  # the shared names, as this module had them


class GuestAgent(Agent):
    """A pydantic-ai agent with ``CeleryDurability``, served by our workers (made by the agents module loader)."""

    guest = True

    def __init__(self, agent: PydanticAgent[Any, Any]) -> None:
        if not agent.name:
            raise ConfigurationError("a pydantic-ai agent served by agents-celery needs a name: Agent(..., name=...)")
        model = agent.model
        model_name = model if isinstance(model, str) else getattr(model, "model_name", type(model).__name__)
        tools = [GuestTool(spec) for spec in _tool_manifests(agent)]
        description = agent.description or ""
        super().__init__(agent.name, model=ModelName(str(model_name)), tools=tools, description=description)  # type: ignore[arg-type]
        self.agent = agent
        self._journals = Journals()
        #: The provider of an ``UploadedFile`` (a file part by ``file_id``): the agent's model's.
        self._provider = str(getattr(model, "system", None) or "openai")
        #: Every run takes ``DeferredToolRequests`` among its output types: any tool may defer (one that needs
        #: approval, raises ``CallDeferred`` or ``ApprovalRequired``, an ``ExternalToolset``'s, an MCP toolset
        #: wrapped for approval, a client's), and a deferred call pauses the run rather than fail it.
        self._output_type: Any = None
        if not _allows_deferred(agent.output_type):
            self._output_type = [agent.output_type, DeferredToolRequests]

    def manifest(self) -> dict[str, Any]:
        return {**super().manifest(), "framework": "pydantic-ai", "output_schema": output_schema(self.agent)}

    def run_step(self, ctx: StepContext) -> StepResult:
        """One segment: ``agent.run(...)`` under the journal, until the run ends or pauses."""
        state = ctx.state
        decided, deferred = split_decided(state)
        refs = refs_in(state.messages)
        prompt = Prompt(ctx.store.parts.fetch(state, refs) if refs else {}, self._provider)
        history, user_prompt, kept = split_messages(state.messages, state.history_len, prompt)
        results = deferred_results(deferred, history) if deferred else None
        segment = Segment.of_step(ctx, self._journals.of(ctx), decided)
        try:
            result = drive(ctx, segment, self._run(segment, user_prompt, history, results, client=_Client.of(state)))
        except MayHaveRun as exc:
            return paused(self, state.model_copy(update={"tool_calls": with_may_have_run(state, exc.call)}), [])
        return self._settle(state, result, kept, prompt)

    async def _run(
        self,
        segment: Segment,
        prompt: str | list[UserContent] | None,
        history: list[ModelMessage],
        results: DeferredToolResults | None,
        client: _Client,
    ) -> AgentRunResult[Any]:
        token = segment.enter()
        try:
            return await self.agent.run(
                prompt,
                message_history=history or None,
                deferred_tool_results=results,
                output_type=self._output_type,
                instructions=client.instructions,
                toolsets=client.toolsets or None,
            )
        except BaseExceptionGroup as group:  # a task group's: the error inside is the one that matters
            raise first_error(group) from None
        finally:
            segment.leave(token)

    def _settle(
        self, state: RunState, result: AgentRunResult[Any], kept: list[dict[str, Any]], prompt: Prompt
    ) -> StepResult:
        """The run after a segment that returned: paused for deferred tools, or completed with its output."""
        new = result.new_messages()
        messages = [*kept, *stored_form(new, ModelMessagesTypeAdapter.dump_python(new, mode="json"), prompt)]
        usage = dict(state.usage)
        got = result.usage
        for ours, theirs in (("prompt_tokens", got.input_tokens), ("completion_tokens", got.output_tokens)):
            usage[ours] = usage.get(ours, 0) + (theirs or 0)
        usage["total_tokens"] = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
        update: dict[str, Any] = {
            "messages": messages,
            "usage": usage,
            "segment": state.segment + 1,
            "turns": state.turns + got.requests,
            "tool_calls": [],
        }
        output = result.output
        if isinstance(output, DeferredToolRequests):
            update["tool_calls"] = deferred_calls(output)
            return paused(self, state.model_copy(update=update), [])
        update["output"] = output_value(output)
        return completed(state.model_copy(update=update), [])


class _Client:
    """What the run's client brought for the agent: context for its instructions (Responses ``instructions`` and
    system messages, AG-UI ``context``) and its own tools, as a pydantic-ai ``ExternalToolset`` (their calls pause
    the run for the client's answers, as deferred calls)."""

    def __init__(self, instructions: str | None, toolsets: list[Any]) -> None:
        self.instructions = instructions
        self.toolsets = toolsets

    @classmethod
    def of(cls, state: RunState) -> _Client:
        context = state.client.get("context")
        lines = [f"- {c.get('description', '')}: {c.get('value', '')}" for c in context or [] if isinstance(c, dict)]
        instructions = "Context from the client:\n" + "\n".join(lines) if lines else None
        defs = [
            ToolDefinition(
                name=t["name"],
                description=t.get("description") or "",
                parameters_json_schema=t.get("parameters") or {"type": "object", "properties": {}},
            )
            for t in state.client_tools
            if t.get("name")
        ]
        return cls(instructions, [ExternalToolset(defs, id="client")] if defs else [])


def output_schema(agent: PydanticAgent[Any, Any]) -> dict[str, Any] | None:
    """The JSON Schema of the agent's structured output, as pydantic-ai gives it (``output_json_schema``); None for
    text output (and ``DeferredToolRequests``, which pauses the run rather than end it)."""
    spec = agent.output_type
    kinds = [t for t in (spec if isinstance(spec, list | tuple) else [spec]) if t not in (str, DeferredToolRequests)]
    if not kinds:
        return None
    try:
        return dict(agent.output_json_schema(kinds if len(kinds) > 1 else kinds[0]))
    except (TypeError, ValueError):  # an output pydantic cannot give a schema of (pydantic's errors are TypeErrors):
        return None  # the agent is still served; its manifest shows no schema, as for text


def _allows_deferred(output_type: Any) -> bool:
    if output_type is DeferredToolRequests:
        return True
    return isinstance(output_type, list | tuple) and any(_allows_deferred(t) for t in output_type)


def _tool_manifests(agent: PydanticAgent[Any, Any]) -> list[dict[str, Any]]:
    """The agent's function tools as our manifests list tools (MCP and dynamic tools are known only at run time)."""
    found: list[dict[str, Any]] = []
    for toolset in agent.toolsets:
        tools = getattr(toolset, "tools", None)
        if not isinstance(tools, dict):
            continue
        for name, tool in tools.items():
            meta = (tool.metadata or {}).get("agents_celery") or {}
            found.append(
                {
                    "name": name,
                    "description": tool.description or "",
                    "parameters": tool.function_schema.json_schema,
                    "requires_confirmation": bool(tool.requires_approval),
                    "idempotent": bool(isinstance(meta, dict) and meta.get("idempotent")),
                    "timeout": tool.timeout,
                }
            )
    return found


def _chat_as_message(message: dict[str, Any], prompt: Prompt) -> ModelMessage | None:
    """A chat message of a session's history (one of our own agents' runs) as pydantic-ai's, where it has one."""
    content = message.get("content")
    if message.get("role") == "user":
        return ModelRequest(parts=[UserPromptPart(prompt.content(content))])
    text = text_of(content)
    if message.get("role") == "assistant" and text:
        return ModelResponse(parts=[TextPart(text)])
    return None


def split_messages(
    messages: list[dict[str, Any]], history_len: int, prompt: Prompt
) -> tuple[list[ModelMessage], str | list[UserContent] | None, list[dict[str, Any]]]:
    """The run's messages as a segment takes them: the message history, the prompt (the user messages not yet
    taken in, their images and files as pydantic-ai user content; None when there are none) and the stored messages
    the segment keeps in front of its own."""
    history: list[ModelMessage] = []
    kept: list[dict[str, Any]] = []
    prompts: list[Any] = []
    for index, message in enumerate(messages):
        if "kind" in message:
            history.append(restored(message, prompt))
            kept.append(message)
        elif index >= history_len and message.get("role") == "user":
            prompts.append(message.get("content"))
        else:
            converted = _chat_as_message(message, prompt)
            if converted is not None:
                history.append(converted)
            kept.append(message)
    return history, prompt.joined(prompts), kept


def deferred_calls(requests: DeferredToolRequests) -> list[ToolCall]:
    """The calls a segment paused for, as our pending calls."""
    calls = [
        ToolCall(
            id=part.tool_call_id,
            name=part.tool_name,
            arguments=part.args_as_json_str(),
            requires_confirmation=True,
            decision="pending",
            pause_reason="confirmation_required",
        )
        for part in requests.approvals
    ]
    calls += [
        ToolCall(
            id=part.tool_call_id,
            name=part.tool_name,
            arguments=part.args_as_json_str(),
            decision="pending",
            pause_reason="client_tool",
        )
        for part in requests.calls
    ]
    return calls


def deferred_results(calls: list[ToolCall], history: list[ModelMessage]) -> DeferredToolResults:
    """Our decisions on the paused calls as pydantic-ai's ``DeferredToolResults``: approved (with the edited
    arguments as ``ToolApproved(override_args=...)``), rejected with the note (``ToolDenied``), or a client's result."""
    asked = {
        p.tool_call_id: p.args_as_dict()
        for m in history
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    }
    results = DeferredToolResults()
    for call in calls:
        if call.pause_reason == "client_tool":
            results.calls[call.id] = call.result if call.result is not None else ""
        elif call.decision == "rejected":
            results.approvals[call.id] = ToolDenied(call.note or "The user rejected this tool call; it did not run.")
        elif call.args != asked.get(call.id, call.args):
            results.approvals[call.id] = ToolApproved(override_args=call.args)
        else:
            results.approvals[call.id] = True
    return results
