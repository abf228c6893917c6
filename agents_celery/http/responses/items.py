"""A session's history as Responses conversation items, and back (no I/O): ``GET`` and ``POST
/v1/conversations/{id}/items`` (:mod:`.endpoint`).

A session holds the messages of its completed runs: Chat Completions messages for our own agents, pydantic-ai's
``ModelMessagesTypeAdapter`` JSON for a pydantic-ai guest's, the SDK's own items (Responses input items) for an
Agents SDK guest's. :func:`items_of` shows each as items; the items a
client adds (the Agents SDK's ``OpenAIConversationsSession`` adds each turn's) are stored as chat messages
(:func:`messages_of`), which both kinds of agent read as history.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from ...content import text_of
from ...errors import BadRequestError, UnsupportedError
from .input import message_item

#: The most items ``GET .../items`` answers in one page (OpenAI's limit), and its default.
MAX_PAGE, DEFAULT_PAGE = 100, 20


def items_of(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A stored conversation message as Responses items."""
    if "kind" in message:
        yield from _pydantic_items(message)
        return
    if "type" in message:  # an Agents SDK item: already one, shown without the SDK's own fields
        yield from _sdk_item(message)
        return
    role, content = message.get("role"), message.get("content")
    text = text_of(content)
    if role == "tool":
        yield {"type": "function_call_output", "call_id": message.get("tool_call_id", ""), "output": text}
        return
    if text and role in ("user", "assistant", "system", "developer"):
        yield {**message_item(str(role), text), "status": "completed"}
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        yield _call_item(call.get("id", ""), fn.get("name", ""), fn.get("arguments", "{}"))


def _pydantic_items(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A pydantic-ai message (``kind`` request or response, with ``parts``) as Responses items."""
    for part in message.get("parts") or []:
        kind = part.get("part_kind")
        if kind in ("user-prompt", "system-prompt"):
            role = "user" if kind == "user-prompt" else "system"
            yield {**message_item(role, text_of(part.get("content"))), "status": "completed"}
        elif kind == "text":
            yield {**message_item("assistant", text_of(part.get("content"))), "status": "completed"}
        elif kind == "tool-call":
            args = part.get("args")
            arguments = args if isinstance(args, str) else json.dumps(args or {})
            yield _call_item(part.get("tool_call_id", ""), part.get("tool_name", ""), arguments)
        elif kind == "tool-return":
            content = part.get("content")
            output = content if isinstance(content, str) else json.dumps(content)
            yield {"type": "function_call_output", "call_id": part.get("tool_call_id", ""), "output": output}


def _sdk_item(item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """An Agents SDK item as a conversation item: messages, function calls and their outputs (reasoning and the SDK's
    other items are not shown)."""
    kind = item.get("type")
    if kind == "message":
        role = str(item.get("role") or "user")
        yield {**message_item(role, text_of(item.get("content"))), "status": "completed"}
    elif kind == "function_call":
        args = item.get("arguments")
        yield _call_item(
            str(item.get("call_id", "")), str(item.get("name", "")), args if isinstance(args, str) else "{}"
        )
    elif kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else text_of(output)
        yield {"type": "function_call_output", "call_id": item.get("call_id", ""), "output": text}


def _call_item(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments, "status": "completed"}


def messages_of(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items a client adds to a conversation, as the chat messages its session stores: a function call joins the
    assistant message before it (the calls of one turn are one message), an output is a ``tool`` message; the
    echoes of our own output (``mcp_call``, approval requests, reasoning) are left out."""
    out: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            raise BadRequestError("a conversation item must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise BadRequestError(f"a message's role must be user, assistant, system or developer, got {role!r}")
            out.append({"role": role, "content": text_of(item.get("content"))})
        elif kind == "function_call":
            _add_call(out, item)
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else text_of(output)
            out.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")), "content": text})
        elif kind not in ("mcp_call", "mcp_approval_request", "mcp_approval_response", "reasoning", "mcp_list_tools"):
            raise UnsupportedError(f"conversation items of type {kind!r} are not supported")
    return out


def _add_call(out: list[dict[str, Any]], item: dict[str, Any]) -> None:
    if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
        raise BadRequestError("a function_call item needs call_id and name")
    call = {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": item["name"], "arguments": str(item.get("arguments") or "{}")},
    }
    last = out[-1] if out else None
    if last is not None and last["role"] == "assistant" and last.get("tool_calls") is not None:
        last["tool_calls"].append(call)
    elif last is not None and last["role"] == "assistant" and "tool_calls" not in last:
        last["tool_calls"] = [call]
    else:
        out.append({"role": "assistant", "content": "", "tool_calls": [call]})


def page(items: list[dict[str, Any]], query: Mapping[str, str], default_order: str) -> dict[str, Any]:
    """A list answer of ``items`` (oldest first, each with an ``id``) for ``limit``, ``after``, ``before`` and
    ``order`` (``asc`` / ``desc``; ``default_order`` when not given), with ``has_more``."""
    order = query.get("order") or default_order
    if order not in ("asc", "desc"):
        raise BadRequestError(f"order must be asc or desc, got {order[:20]!r}")
    raw = query.get("limit") or str(DEFAULT_PAGE)
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise BadRequestError(f"limit must be a number from 1 to {MAX_PAGE}, got {raw[:20]!r}")
    ordered = items if order == "asc" else items[::-1]
    ids = [i["id"] for i in ordered]
    for key, cut in (("after", 1), ("before", 0)):
        mark = query.get(key)
        if not mark:
            continue
        if mark not in ids:
            raise BadRequestError(f"{key}: no item {mark[:80]!r} here")
        at = ids.index(mark)
        ordered, ids = (ordered[at + 1 :], ids[at + 1 :]) if cut else (ordered[:at], ids[:at])
    shown = ordered[: int(raw)]
    return {
        "object": "list",
        "data": shown,
        "first_id": shown[0]["id"] if shown else None,
        "last_id": shown[-1]["id"] if shown else None,
        "has_more": len(ordered) > len(shown),
    }
