"""A run's conversation as OpenAI chat messages, whoever wrote it.

Our own agents keep chat messages (``{"role": ..., "content": ...}``); a pydantic-ai agent's runs keep pydantic-ai's
message history (``ModelMessagesTypeAdapter`` JSON: ``{"kind": "request" | "response", "parts": [...]}``); an Agents
SDK agent's runs keep the SDK's items (OpenAI Responses input items, each with a ``type``: ``message``,
``function_call``, ``function_call_output`` ...). Readers that show a conversation (the AG-UI endpoint's
MESSAGES_SNAPSHOT, its history check, ``GET /runs/<id>``'s messages) read it through :func:`as_chat`, so every kind
looks the same. Plain dicts in, plain dicts out: no framework is imported here.
"""

from __future__ import annotations

import json
from typing import Any

from .content import text_of


def _user_content(content: Any) -> Any:
    """A user prompt's content as a chat message's: its text, or content parts when it holds images or files (a
    part stored beside the run as the reference part it is kept as, an image by URL as an ``image_url`` part)."""
    if not isinstance(content, list) or not any(isinstance(c, dict) and _is_file(c) for c in content):
        return text_of(content)
    out: list[dict[str, Any]] = []
    for item in content:
        if isinstance(item, str):
            out.append({"type": "text", "text": item})
        elif "ref" in item:
            out.append(item)
        elif item.get("kind") == "image-url":
            out.append({"type": "image_url", "image_url": {"url": item.get("url", "")}})
        elif _is_file(item):  # inline data of the user's own making: named, not copied
            out.append({"type": "text", "text": f"[{item.get('media_type') or item.get('kind')}]"})
        else:
            out.append({"type": "text", "text": text_of([item])})
    return out


#: The kinds of pydantic-ai's user content that are images or files.
_FILES = ("image-url", "document-url", "audio-url", "video-url", "binary", "uploaded-file")


def _is_file(item: dict[str, Any]) -> bool:
    return "ref" in item or item.get("kind") in _FILES


def user_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user messages among ``messages`` (chat messages, pydantic-ai's user prompts, the Agents SDK's user
    message items), as chat messages: what the run was given (``GET /runs/<id>/input``)."""
    out = []
    for m in messages:
        if "type" in m:
            if m.get("type") == "message" and m.get("role") == "user":
                out.append({"role": "user", "content": _item_content(m.get("content"))})
        elif m.get("kind") == "request":
            parts = m.get("parts") or []
            out += [
                {"role": "user", "content": _user_content(p.get("content"))}
                for p in parts
                if p.get("part_kind") == "user-prompt"
            ]
        elif m.get("role") == "user":
            out.append(m)
    return out


def _request(message: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in message.get("parts") or []:
        kind = part.get("part_kind")
        if kind == "system-prompt":
            out.append({"role": "system", "content": text_of(part.get("content"))})
        elif kind == "user-prompt":
            out.append({"role": "user", "content": _user_content(part.get("content"))})
        elif kind == "tool-return":
            content = part.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            out.append({"role": "tool", "tool_call_id": part.get("tool_call_id", ""), "content": text})
        elif kind == "retry-prompt":
            text = text_of(part.get("content"))
            if part.get("tool_name"):
                out.append({"role": "tool", "tool_call_id": part.get("tool_call_id", ""), "content": text})
            else:
                out.append({"role": "user", "content": text})
    return out


def _response(message: dict[str, Any]) -> dict[str, Any]:
    text = "".join(p.get("content") or "" for p in message.get("parts") or [] if p.get("part_kind") == "text")
    calls = [
        {
            "id": p.get("tool_call_id", ""),
            "type": "function",
            "function": {"name": p.get("tool_name", ""), "arguments": _arguments(p.get("args"))},
        }
        for p in message.get("parts") or []
        if p.get("part_kind") == "tool-call"
    ]
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = calls
    return out


def _arguments(args: Any) -> str:
    if isinstance(args, str):
        return args
    return json.dumps(args if args is not None else {})


def as_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every pydantic-ai message and Agents SDK item replaced by the chat messages it stands for."""
    if not any("kind" in m or "type" in m for m in messages):
        return messages
    out: list[dict[str, Any]] = []
    for m in messages:
        if "type" in m:
            _item(out, m)
        elif m.get("kind") == "request":
            out += _request(m)
        elif m.get("kind") == "response":
            out.append(_response(m))
        else:
            out.append(m)
    return out


def _item(out: list[dict[str, Any]], item: dict[str, Any]) -> None:
    """An Agents SDK item (a Responses input item) onto ``out`` as chat messages: a function call joins the
    assistant message before it (the calls of one turn are one message), its output is a ``tool`` message;
    reasoning and other items are not shown."""
    kind = item.get("type")
    if kind == "message":
        role = item.get("role") or "user"
        content = item.get("content")
        out.append({"role": role, "content": _item_content(content) if role == "user" else text_of(content)})
    elif kind == "function_call":
        call = {
            "id": item.get("call_id", ""),
            "type": "function",
            "function": {"name": item.get("name", ""), "arguments": _arguments(item.get("arguments"))},
        }
        last = out[-1] if out else None
        if last is not None and last.get("role") == "assistant":
            last["tool_calls"] = [*(last.get("tool_calls") or []), call]
        else:
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else text_of(output)
        out.append({"role": "tool", "tool_call_id": item.get("call_id", ""), "content": text})


def _item_content(content: Any) -> Any:
    """A user message item's content as a chat message's: text; or parts (ours as stored, with their references;
    the Responses ``input_text`` / ``input_image`` / ``input_file`` parts as Chat Completions parts)."""
    if not isinstance(content, list):
        return text_of(content)
    if not any(isinstance(p, dict) and (p.get("type") in ("input_image", "input_file") or "ref" in p) for p in content):
        return text_of(content)
    out: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "input_text":
            out.append({"type": "text", "text": part.get("text", "")})
        elif kind == "input_image":
            out.append({"type": "image_url", "image_url": {"url": part.get("image_url") or ""}})
        elif kind == "input_file":
            out.append({"type": "text", "text": f"[{part.get('filename') or 'file'}]"})
        else:
            out.append(part)
    return out
