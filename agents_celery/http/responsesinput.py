"""A Responses API request's ``input``, ``tools`` and ``text.format`` as our words (no I/O, no Runtime).

:func:`parse_input` sorts the input items into the new user message (its parts in Chat Completions form, see
:mod:`agents_celery.content`), the context given to the model, and the answers to a paused run (function call
outputs, approvals as :class:`~agents_celery.decisions.Decision`); BadRequestError or UnsupportedError name
what is wrong. The routes (:mod:`.openairesponses`) use these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..decisions import Decision
from ..errors import BadRequestError, UnsupportedError
from .bodies import Limits, loads


@dataclass
class Input:
    """A request's ``input``, sorted: the new user message, what goes to the model as context, the answers to a
    paused run, and the items as given (``input_items``)."""

    text: str | None = None
    #: The new user message's parts when it carries images or files (None: text only).
    parts: list[dict[str, Any]] | None = None
    context: list[dict[str, str]] = field(default_factory=list)
    approvals: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    #: Earlier user and assistant messages of a client that sends its whole history, as context for the model
    #: (left out when the request goes on a session of ours, which holds that history).
    earlier: list[dict[str, str]] = field(default_factory=list)
    #: The call ids the items carry (function calls, their outputs, approval requests and answers), in order.
    call_ids: list[str] = field(default_factory=list)


def _chat_part(part: Any) -> dict[str, Any]:
    """A Responses input content part as a Chat Completions one (:mod:`agents_celery.content`)."""
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if not isinstance(part, dict):
        raise BadRequestError("a content part must be an object")
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": str(part.get("text") or "")}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        image = {"url": part["image_url"], **({"detail": part["detail"]} if part.get("detail") else {})}
        return {"type": "image_url", "image_url": image}
    if kind == "input_file" and isinstance(part.get("file_data"), str):
        return {"type": "file", "file": {"filename": part.get("filename") or "file", "file_data": part["file_data"]}}
    if kind == "input_file" and isinstance(part.get("file_id"), str):
        return {"type": "file", "file": {"file_id": part["file_id"]}}
    if kind in ("input_image", "input_file", "input_audio"):
        raise UnsupportedError(
            f"a {kind!r} part needs its data inline (image_url: a URL or data URL; input_file: file_data or file_id)"
        )
    raise BadRequestError(f"unknown content part type {kind!r}")


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [_chat_part(p) for p in content]
    raise BadRequestError("a message's content must be a string or a list of parts")


def _content_text(content: Any) -> str:
    """The text of content that may hold only text (a function call's output, an earlier message)."""
    parts = _content_parts(content)
    if any(p["type"] != "text" for p in parts):
        raise UnsupportedError("only the new user message may carry images and files")
    return "".join(p["text"] for p in parts)


def _as_input_items(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parts as ``input_items`` shows them: inline data is not repeated (it is stored once, with the run)."""
    shown = []
    for p in parts:
        if p["type"] == "text":
            shown.append({"type": "input_text", "text": p["text"]})
        elif p["type"] == "image_url":
            url = p["image_url"]["url"]
            shown.append({"type": "input_image", "image_url": url if not url.startswith("data:") else None})
        else:
            shown.append(
                {"type": "input_file", "filename": p["file"].get("filename"), "file_id": p["file"].get("file_id")}
            )
    return shown


def parse_input(value: str | list[dict[str, Any]], instructions: str | None) -> Input:
    """The request's input, sorted (see :class:`Input`); BadRequestError / UnsupportedError naming the problem.
    What it is (a new turn, answers, a history replayed) is decided by :func:`.responsesturn.classify`."""
    got = Input()
    if instructions:
        got.context.append({"description": "instructions", "value": instructions})
    if isinstance(value, str):
        got.text = value
        got.items = [message_item("user", value)]
        return _checked(got)
    messages: list[tuple[str, str]] = []
    last = _last_user(value)
    for i, item in enumerate(value):
        if i == last:
            parts = _content_parts(item.get("content"))
            got.text = "".join(p["text"] for p in parts if p["type"] == "text")
            if any(p["type"] != "text" for p in parts):
                got.parts = parts
            got.items.append({"type": "message", "role": "user", "content": _as_input_items(parts)})
        else:
            _take(got, item, messages)
    for role, text in messages:
        if role in ("system", "developer"):
            got.context.append({"description": f"{role} message", "value": text})
    turns = [(role, text) for role, text in messages if role in ("user", "assistant")]
    got.earlier = [{"description": f"earlier {role} message", "value": text} for role, text in turns]
    return _checked(got)


def _last_user(items: list[dict[str, Any]]) -> int | None:
    """Where the new user message is: the last item, when it is a user message."""
    if items and items[-1].get("role") == "user" and items[-1].get("type", "message") == "message":
        return len(items) - 1
    return None


def _take(got: Input, item: dict[str, Any], messages: list[tuple[str, str]]) -> None:
    """One input item into ``got`` (a message's role and text into ``messages``)."""
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise BadRequestError(f"a message's role must be user, assistant, system or developer, got {role!r}")
        messages.append((role, _content_text(item.get("content"))))
        got.items.append(message_item(role, messages[-1][1]))
    elif kind == "function_call_output":
        if not isinstance(item.get("call_id"), str) or "output" not in item:
            raise BadRequestError("a function_call_output item needs call_id and output")
        output = item["output"]
        text = output if isinstance(output, str) else _content_text(output)
        got.outputs.append({"call_id": item["call_id"], "output": text})
        got.call_ids.append(item["call_id"])
        got.items.append({"type": "function_call_output", "call_id": item["call_id"], "output": text})
    elif kind == "mcp_approval_response":
        if not isinstance(item.get("approval_request_id"), str) or not isinstance(item.get("approve"), bool):
            raise BadRequestError("an mcp_approval_response item needs approval_request_id and approve (bool)")
        got.approvals.append(item)
        got.call_ids.append(item["approval_request_id"])
        got.items.append({k: item[k] for k in ("type", "approval_request_id", "approve", "reason") if k in item})
    elif kind in ("function_call", "mcp_approval_request"):
        # A stateless client sends the previous output back: we have it, but its ids name the run.
        ident = item.get("call_id") if kind == "function_call" else item.get("id")
        if isinstance(ident, str):
            got.call_ids.append(ident)
    elif kind not in ("mcp_call", "reasoning", "mcp_list_tools"):
        raise UnsupportedError(f"input items of type {kind!r} are not supported")


def _checked(got: Input) -> Input:
    if got.text is not None and not got.text.strip() and got.parts is None:
        raise BadRequestError("the user message must not be blank")
    if got.text is None and not (got.approvals or got.outputs):
        raise BadRequestError("input must end with a user message, or answer a paused response")
    return got


def message_item(role: str, text: str) -> dict[str, Any]:
    """A text message as a Responses ``message`` item."""
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def function_tools(tools: list[dict[str, Any]], agent: str) -> list[dict[str, Any]]:
    """The client's function tools as our client tools (name, description, parameters). An ``mcp`` tool whose
    ``server_label`` is the agent stands for the agent's own tools (an Agents SDK ``HostedMCPTool`` that takes the
    agent's approval requests): nothing to add. Other types are refused."""
    out = []
    for spec in tools:
        if spec.get("type") == "mcp" and spec.get("server_label") == agent:
            continue
        if spec.get("type") == "mcp":
            raise UnsupportedError(
                f"an mcp tool must have server_label {agent!r} (the agent's own tools); other MCP servers are not "
                "supported"
            )
        if spec.get("type") != "function":
            raise UnsupportedError(
                f"tools of type {spec.get('type')!r} are not supported (only 'function', and 'mcp' naming the agent)"
            )
        if not isinstance(spec.get("name"), str) or not spec["name"]:
            raise BadRequestError("a function tool needs a name")
        entry = {"name": spec["name"], "description": spec.get("description") or ""}
        if isinstance(spec.get("parameters"), dict):
            entry["parameters"] = spec["parameters"]
        out.append(entry)
    return out


def output_schema_of(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's ``output_schema`` for ``text.format`` (``json_schema``: its schema; ``json_object``: any object)."""
    spec = (text or {}).get("format") or {"type": "text"}
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise BadRequestError("text.format json_schema needs a schema (a JSON Schema object)")
        return schema
    raise UnsupportedError(f"text.format of type {kind!r} is not supported (text, json_schema, json_object)")


def conversation_of(value: str | dict[str, Any] | None) -> str | None:
    """The conversation id a request names (``conversation``: an id, or an object with one; None: none)."""
    if value is None or isinstance(value, str):
        return value or None
    ident = value.get("id")
    if not isinstance(ident, str) or not ident:
        raise BadRequestError("conversation must be an id, or an object with one")
    return ident


def approval(item: dict[str, Any]) -> Decision:
    """An ``mcp_approval_response`` as a decision; ``arguments`` (JSON text or an object) edits the call's."""
    ident, approve = item["approval_request_id"], item["approve"]
    reason = item.get("reason") if isinstance(item.get("reason"), str) else None
    edited = item.get("arguments")
    if isinstance(edited, str):  # JSON text inside the body: held to the body's depth (5,000 deep: 400, not 500)
        edited = loads(edited, Limits(), f"the arguments of approval {ident!r}")
    if edited is not None and not isinstance(edited, dict):
        raise BadRequestError(f"the arguments of approval {ident!r} must be a JSON object")
    return Decision(ident, approve, reason, edited if approve else None)
