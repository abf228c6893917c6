"""A run's messages as the Agents SDK's input items, and back. Plain dicts, no I/O.

An Agents SDK run keeps its conversation as the SDK's own items (OpenAI Responses input items: ``{"type":
"message", "role", "content"}``, ``function_call``, ``function_call_output``, ``reasoning`` ...): each stored item
has a ``type``, which is how readers (:mod:`agents_celery.conversation`) and :func:`split_messages` tell them from
our chat messages, which never have one. A user message the run was given is stored as a ``message`` item whose
content is ours, as stored (text, or Chat Completions parts with their data kept beside the run: reference parts),
and becomes Responses content parts (``input_text``, ``input_image``, ``input_file``) when the SDK is given it
(:func:`sdk_content`). A session started by one of our own agents (chat messages) or a pydantic-ai agent is handed
on as items (:func:`chat_items`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...content import text_of
from ...conversation import as_chat


def typed(item: dict[str, Any]) -> dict[str, Any]:
    """An input item as stored: with its ``type`` (an SDK ``EasyInputMessage`` has none: it is a message)."""
    return item if "type" in item else {"type": "message", **item}


def user_item(content: Any) -> dict[str, Any]:
    """A user message the run was given, as a stored item (its content as we store it)."""
    return {"type": "message", "role": "user", "content": content}


def sdk_content(content: Any, parts: Mapping[str, dict[str, Any]]) -> Any:
    """A user message's content as the SDK takes it: text as it is; Chat Completions parts (their references
    resolved from ``parts``) as Responses input parts. Parts already in Responses form pass as they are."""
    if not isinstance(content, list):
        return text_of(content)
    out: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            out.append({"type": "input_text", "text": part})
            continue
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("ref"), str):
            found = parts.get(part["ref"])
            name = part.get("filename") or part.get("media_type") or "attachment"
            part = found if found is not None else {"type": "text", "text": f"[{name}: no longer kept]"}
        out.append(_part(part))
    return out


def _part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": str(part.get("text", ""))}
    if kind == "image_url":
        image = part.get("image_url") or {}
        url = image.get("url", "") if isinstance(image, dict) else str(image)
        detail = image.get("detail") if isinstance(image, dict) else None
        return {"type": "input_image", "image_url": url, "detail": detail or "auto"}
    if kind == "file":
        file = part.get("file") or {}
        out: dict[str, Any] = {"type": "input_file"}
        for key in ("file_id", "file_data", "filename"):
            if file.get(key):
                out[key] = file[key]
        return out
    return part


def chat_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages (a session of our own agents; a pydantic-ai history, read as chat) as input items: user and
    assistant text, an assistant's tool calls and their results. System messages are left out: the agent has its
    own instructions."""
    out: list[dict[str, Any]] = []
    for message in as_chat(messages):
        role = message.get("role")
        if role == "tool":
            output = text_of(message.get("content"))
            out.append({"type": "function_call_output", "call_id": message.get("tool_call_id", ""), "output": output})
            continue
        if role in ("user", "assistant") and (role == "user" or text_of(message.get("content"))):
            content = message.get("content") if role == "user" else text_of(message.get("content"))
            out.append({"type": "message", "role": role, "content": content})
        for call in message.get("tool_calls") or [] if role == "assistant" else []:
            fn = call.get("function") or {}
            arguments = fn.get("arguments")
            arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
            name, call_id = fn.get("name", ""), call.get("id", "")
            out.append({"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments})
    return out


@dataclass
class Split:
    """A run's messages as a segment takes them."""

    #: The items the SDK is given before the run's own: the session's history.
    history: list[dict[str, Any]] = field(default_factory=list)
    #: The stored messages kept in front of the run's items (the session's history, as stored).
    kept: list[dict[str, Any]] = field(default_factory=list)
    #: The run's own items so far (its first user message, ...), as stored.
    own: list[dict[str, Any]] = field(default_factory=list)
    #: User messages not yet taken in (the first segment's prompt; messages sent to the run since), as stored.
    new: list[dict[str, Any]] = field(default_factory=list)


def split_messages(messages: list[dict[str, Any]], history_len: int) -> Split:
    """The run's messages: the session's history (what a chat message of it stands for, as items), the run's own
    items, and the user messages not yet taken in (chat messages after the history)."""
    split = Split()
    chat: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if index < history_len:
            split.kept.append(message)
            if "type" in message:
                split.history += [*chat_items(chat), message]
                chat = []
            else:
                chat.append(message)
        elif "type" in message:
            split.own.append(message)
        elif message.get("role") == "user":
            split.new.append(user_item(message.get("content")))
    split.history += chat_items(chat)
    return split


def sdk_items(items: list[dict[str, Any]], parts: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored items as the SDK is given them: a user message's content in Responses form."""
    out = []
    for item in items:
        if item.get("type") == "message" and item.get("role") == "user":
            item = {**item, "content": sdk_content(item.get("content"), parts)}
        out.append(item)
    return out
