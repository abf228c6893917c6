"""A Responses API request's ``input``, ``tools`` and ``text.format`` as our words (no I/O, no Runtime).

:func:`parse_input` sorts the input items into the new user message (its parts in Chat Completions form, see
:mod:`agents_celery.content`), the context given to the model, and the answers to a paused run (function call
outputs, approvals as :class:`~agents_celery.decisions.Decision`); BadRequestError or UnsupportedError name
what is wrong. The routes (:mod:`.endpoint`) use these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...content import text_of
from ...decisions import Decision
from ...errors import BadRequestError, PayloadTooLargeError, UnsupportedError
from ..bodies import Limits, loads

#: OpenAI's limits on ``metadata``: 16 pairs, keys of 64 characters at most, values of 512.
MAX_METADATA, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512


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


def check_create(fields: dict[str, Any], *, max_chars: int, max_bytes: int) -> None:
    """A create body's texts held to the limits, before anything is done with it (docs/responses.md, "Limits").

    Each text is at most ``max_chars`` characters (``AGENTS_CELERY_MAX_MESSAGE_CHARS``): the instructions, each
    message's text (the new user message's text parts together), each function call's output and arguments, an
    approval's reason and arguments; ``metadata`` is held to OpenAI's limits. A text over its limit is a 400 naming
    it (``param``: ``input[3].content``). Then the body without the new user message's inline images and files
    (they have their own limits, checked when the run takes them) is at most ``max_bytes``
    (``AGENTS_CELERY_MAX_BODY_BYTES``): 413 otherwise. So the texts a run stores with it stay as small as the
    other routes' bodies, whatever room the body has for images.
    """
    instructions = fields.get("instructions")
    if isinstance(instructions, str):
        _check_chars(instructions, "instructions", max_chars)
    _check_metadata(fields.get("metadata"))
    value = fields.get("input")
    inline: set[int] = set()
    if isinstance(value, str):
        _check_chars(value, "input", max_chars)
    elif isinstance(value, list):
        last = _last_user(value)
        for i, item in enumerate(value):
            if isinstance(item, dict):
                check_item(item, f"input[{i}]", max_chars)
                if i == last:
                    inline = _inline_data(item.get("content"))
    size = _size(fields, inline)
    if size > max_bytes:
        error = PayloadTooLargeError(
            f"the body holds {size} bytes besides the new message's images and files; at most {max_bytes} are "
            "accepted (AGENTS_CELERY_MAX_BODY_BYTES)"
        )
        error.param = "input"
        raise error


def check_item(item: dict[str, Any], where: str, max_chars: int) -> None:
    """The texts of one input or conversation item (``where``: its param, ``input[3]``) held to ``max_chars``."""
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        _check_chars(text_of(item.get("content")), f"{where}.content", max_chars)
    elif kind == "function_call_output":
        _check_chars(text_of(item.get("output")), f"{where}.output", max_chars)
    for key in ("arguments", "reason"):
        if key in item:
            text = item[key] if isinstance(item[key], str) else json.dumps(item[key], default=str)
            _check_chars(text, f"{where}.{key}", max_chars)


def _check_chars(text: str, param: str, most: int) -> None:
    if len(text) > most:
        error = BadRequestError(
            f"{param} has {len(text)} characters; at most {most} are accepted (AGENTS_CELERY_MAX_MESSAGE_CHARS)"
        )
        error.code, error.param = "string_above_max_length", param
        raise error


def _check_metadata(metadata: Any) -> None:
    if not isinstance(metadata, dict):
        return
    problem = None
    if len(metadata) > MAX_METADATA:
        problem = f"metadata has {len(metadata)} pairs; at most {MAX_METADATA} are accepted"
    for key, value in metadata.items():
        if len(str(key)) > MAX_METADATA_KEY:
            problem = f"metadata key {str(key)[:40]!r}... is over {MAX_METADATA_KEY} characters"
        elif isinstance(value, str) and len(value) > MAX_METADATA_VALUE:
            problem = f"metadata value of {str(key)[:40]!r} has {len(value)} characters; at most {MAX_METADATA_VALUE}"
    if problem:
        error = BadRequestError(problem)
        error.param = "metadata"
        raise error


def _inline_data(content: Any) -> set[int]:
    """The ids of the strings holding the inline data (data URLs, ``file_data``) of the new message's parts."""
    found: set[int] = set()
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        url, data = part.get("image_url"), part.get("file_data")
        if part.get("type") == "input_image" and isinstance(url, str) and url.startswith("data:"):
            found.add(id(url))
        if part.get("type") == "input_file" and isinstance(data, str):
            found.add(id(data))
    return found


def _size(value: Any, skip: set[int]) -> int:
    """The bytes of the texts in ``value`` (keys and strings, UTF-8), the strings whose ids are in ``skip`` left
    out (the body's depth is held to its limit before: the walk is shallow)."""
    if isinstance(value, str):
        return 0 if id(value) in skip else len(value.encode("utf-8", "replace"))
    if isinstance(value, dict):
        return sum(len(str(k)) + _size(v, skip) for k, v in value.items())
    if isinstance(value, list):
        return sum(_size(v, skip) for v in value)
    return len(str(value))


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
    What it is (a new turn, answers, a history replayed) is decided by :func:`.turn.classify`."""
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


def compact(record: dict[str, Any], context: list[dict[str, str]]) -> dict[str, Any]:
    """A run's Responses record without the texts its context holds already (the context is stored with the run,
    and both are rewritten with each checkpoint): the instructions, and each earlier message of the input, name
    their place in the context instead (``{"context": n}``). :func:`expand` gives them back."""
    out = dict(record)
    if context and context[0]["description"] == "instructions" and record.get("instructions") == context[0]["value"]:
        out["instructions"] = {"context": 0}
    items, at = [], 0
    for item in record.get("input") or []:
        found = _place(context, at, item)
        if found is None:
            items.append(item)
        else:
            items.append({"type": "message", "role": item.get("role"), "context": found})
            at = found + 1
    out["input"] = items
    return out


def expand(record: dict[str, Any], context: Any) -> dict[str, Any]:
    """A record as :func:`compact` left it, its texts taken back from the run's context."""

    def text(ref: Any) -> Any:
        n = ref.get("context") if isinstance(ref, dict) else None
        if isinstance(n, int) and isinstance(context, list) and 0 <= n < len(context) and isinstance(context[n], dict):
            return context[n].get("value")
        return ref

    out = dict(record)
    if isinstance(record.get("instructions"), dict):
        out["instructions"] = text(record["instructions"])
    items = []
    for item in record.get("input") or []:
        if isinstance(item, dict) and "context" in item and "content" not in item:
            items.append(message_item(str(item.get("role")), str(text(item) or "")))
        else:
            items.append(item)
    out["input"] = items
    return out


def _place(context: list[dict[str, str]], at: int, item: dict[str, Any]) -> int | None:
    """Where, from ``at`` on, the context holds the text of a message ``item`` (None: it holds none)."""
    text, role = _single_text(item), item.get("role")
    if text is None:
        return None
    kinds = (f"{role} message", f"earlier {role} message")
    return next(
        (n for n in range(at, len(context)) if context[n]["value"] == text and context[n]["description"] in kinds), None
    )


def _single_text(item: dict[str, Any]) -> str | None:
    """The text of a message item holding one text part (as :func:`message_item` makes them), else None."""
    content = item.get("content")
    if item.get("type") != "message" or not isinstance(content, list) or len(content) != 1:
        return None
    part = content[0]
    return part.get("text") if isinstance(part, dict) and isinstance(part.get("text"), str) else None


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
