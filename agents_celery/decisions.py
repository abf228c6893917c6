"""Decisions on paused tool calls: approve, reject with a note, approve with edited arguments.

Plain functions over run state, so they can be tested without Redis; :meth:`Runtime.continue_run` applies
them and commits the result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import jsonschema

from .errors import DecisionError, ToolArgumentsError
from .mcp import exposed_name
from .runs import RunState, ToolCall


@dataclass(frozen=True)
class Decision:
    """A human's answer to one paused tool call."""

    tool_call_id: str
    confirmed: bool = True
    note: str | None = None
    #: Replacement arguments (validated against the tool's parameters).
    tool_args: dict[str, Any] | None = None
    #: The result of a call of a client's tool (the client ran it); only for such calls, and required there.
    result: str | None = None


def decide(state: RunState, decisions: list[Decision], manifest: dict[str, Any]) -> list[ToolCall]:
    """The run's tool calls with ``decisions`` applied; nothing is written.

    Raises:
        DecisionError: a decision names no pending call, or some pending calls are left undecided.
        ToolArgumentsError: edited arguments fail the tool's parameter schema (from its manifest).
    """
    pending = {c.id: c for c in state.pending}
    by_id: dict[str, Decision] = {}
    for d in decisions:
        if d.tool_call_id in by_id:
            raise DecisionError(f"tool call {d.tool_call_id!r} is decided twice; decide each pending call once")
        if d.tool_call_id not in pending:
            raise DecisionError(
                f"tool call {d.tool_call_id!r} is not pending in run {state.run_id!r}; pending: {sorted(pending)}"
            )
        by_id[d.tool_call_id] = d
    if decisions and set(by_id) != set(pending):
        missing = sorted(set(pending) - set(by_id))
        raise DecisionError(f"decide every pending tool call or none (none approves all); missing: {missing}")
    for call in pending.values():
        answer = by_id.get(call.id)
        client = call.pause_reason == "client_tool"
        if client and (answer is None or answer.result is None):
            raise DecisionError(f"tool call {call.id!r} ({call.name}) is the client's: answer it with its result")
        if not client and answer is not None and answer.result is not None:
            raise DecisionError(f"tool call {call.id!r} ({call.name}) runs here: approve or reject it, no result")
    params = {t["name"]: t.get("parameters") for t in manifest.get("tools", [])}
    params.update((k, v) for k, v in mcp_parameters(state, manifest).items() if k not in params)
    out = []
    for call in state.tool_calls:
        if call.id not in pending:
            out.append(call)
            continue
        out.append(_apply(call, by_id.get(call.id, Decision(call.id)), params.get(call.name)))
    return out


def mcp_parameters(state: RunState, manifest: dict[str, Any]) -> dict[str, Any]:
    """The parameter schemas of the agent's MCP tools by the names the model calls them: from the tool lists the
    run recorded, else from what the toolsets last served on a worker (the manifest)."""
    found: dict[str, Any] = {}
    for ts in manifest.get("toolsets", []):
        listing = state.toolsets.get(ts.get("name", ""), {})
        for spec in listing.get("tools", []):
            found.setdefault(exposed_name(ts.get("prefix", ""), spec["name"]), spec.get("input_schema"))
        for t in ts.get("tools", []):
            found.setdefault(t["name"], t.get("parameters"))
    return found


def as_decision(value: Decision | dict[str, Any]) -> Decision:
    """A Decision from itself or from its JSON form (``tool_call_id``, ``confirmed``, ``confirmation_note``,
    ``tool_args``), as HTTP and CLI callers send it."""
    if isinstance(value, Decision):
        return value
    if not isinstance(value, dict) or not isinstance(value.get("tool_call_id"), str):
        raise DecisionError(f"each decision needs a 'tool_call_id' string; got {value!r}")
    args = value.get("tool_args")
    if args is not None and not isinstance(args, dict):
        raise ToolArgumentsError(f"tool_args of {value['tool_call_id']!r} must be a JSON object")
    confirmed = value.get("confirmed", True)
    if not isinstance(confirmed, bool):
        raise DecisionError(f"'confirmed' of {value['tool_call_id']!r} must be true or false")
    result = value.get("result")
    if result is not None and not isinstance(result, str):
        result = json.dumps(result)
    note = value.get("confirmation_note") or value.get("note")
    return Decision(value["tool_call_id"], confirmed, note, args, result)


def _apply(call: ToolCall, d: Decision, schema: dict[str, Any] | None) -> ToolCall:
    if call.pause_reason == "client_tool":
        return call.model_copy(update={"decision": "approved", "result": d.result})
    update: dict[str, Any] = {"decision": "approved" if d.confirmed else "rejected", "note": d.note}
    if call.pause_reason == "may_have_run":
        update["rerun"] = call.rerun + 1 if d.confirmed else call.rerun
        if not d.confirmed:
            update["note"] = d.note or "The tool may or may not have completed in a crashed attempt; not re-run."
    if d.tool_args is not None and d.confirmed:
        if schema is not None:
            try:
                jsonschema.validate(d.tool_args, schema)
            except jsonschema.ValidationError as exc:
                where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
                raise ToolArgumentsError(
                    f"edited arguments for {call.name!r} are invalid at {where}: {exc.message}"
                ) from None
        update["arguments"] = json.dumps(d.tool_args)
        update["error"] = None
    return call.model_copy(update=update)


def with_edited_args(messages: list[dict[str, Any]], calls: list[ToolCall]) -> list[dict[str, Any]]:
    """The conversation with the last assistant turn's tool-call arguments replaced by the edited ones."""
    if not messages or messages[-1].get("role") != "assistant":
        return messages
    args = {c.id: c.arguments for c in calls}
    last = dict(messages[-1])
    last["tool_calls"] = [
        {**tc, "function": {**tc["function"], "arguments": args.get(tc["id"], tc["function"]["arguments"])}}
        for tc in last.get("tool_calls", [])
    ]
    return [*messages[:-1], last]


@dataclass(frozen=True)
class Routing:
    """Where the decisions of a continue go, for a run paused for calls of its child runs (and maybe its own)."""

    #: The decisions of the run's own pending calls.
    own: list[Decision]
    #: Whether the run has pending calls of its own (decided above, or all approved when none were given).
    has_own: bool
    #: Child run id -> the decisions of its calls, named as the child names them (without the ``<child id>:``
    #: prefix its parent shows them with); a grandchild's calls go through the child that holds them.
    forwarded: dict[str, list[Decision]]


def route(state: RunState, paused: dict[str, RunState], decisions: list[Decision]) -> Routing:
    """Route ``decisions`` of a run paused for its children's calls (``paused``: its paused children by run id)
    to the runs holding the calls; every pending call decided, or none (none: each holder approves all).

    Raises:
        DecisionError: a decision names no pending call, or some pending calls are left undecided.
    """
    own = {c.id for c in state.tool_calls if c.decision == "pending"}
    holders = {f"{cid}:{c.id}": cid for cid, child in paused.items() for c in child.pending}
    given = {d.tool_call_id for d in decisions}
    pending = own | set(holders)
    if unknown := sorted(given - pending):
        raise DecisionError(f"tool calls {unknown} are not pending in run {state.run_id!r}; pending: {sorted(pending)}")
    if decisions and given != pending:
        raise DecisionError(
            f"decide every pending tool call or none (none approves all); missing: {sorted(pending - given)}"
        )
    forwarded = {
        cid: [
            replace(d, tool_call_id=d.tool_call_id[len(cid) + 1 :])
            for d in decisions
            if holders.get(d.tool_call_id) == cid
        ]
        for cid in sorted(set(holders.values()))
    }
    return Routing([d for d in decisions if d.tool_call_id in own], bool(own), forwarded)
