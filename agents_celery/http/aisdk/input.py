"""What the AI SDK's chat transport sends (``DefaultChatTransport``: ``{id, messages, trigger, messageId, ...}``),
read into what a run takes: the new user message as content parts, or the answers an assistant message carries.

The chat ``id`` is our session id. The messages before the last are the page's view of the chat; the session's
stored history is the truth, so they are not read. Parts the run cannot take are refused (422, naming the part),
never dropped.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from ...content import UserContent
from ...decisions import Decision
from ...errors import BodyValidationError, ValidationError
from ...runs import ToolCall


class UIMessage(BaseModel):
    """One message of the chat as the SDK holds it (``UIMessage``): its parts carry text, files and tool calls."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(max_length=200)
    role: Literal["system", "user", "assistant"]
    parts: list[dict[str, Any]] = Field(default_factory=list)
    metadata: Any = None


class ClientTool(BaseModel):
    """A tool the page runs itself (``onToolCall`` and ``addToolOutput``): named to the model with its schema."""

    name: str = Field(min_length=1, max_length=64)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ChatBody(BaseModel):
    """The body of ``POST /aisdk/<agent_id>``: what ``DefaultChatTransport`` sends, and ``tools`` (the page's
    own tools, ours: the transport's ``body`` option carries it). Other fields the page adds are ignored."""

    model_config = ConfigDict(extra="allow")

    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="the chat: our session id (absent, as @ai-sdk/workflow sends it: the session of the history's "
        "last assistant message, else a new one)",
    )
    messages: list[UIMessage] = Field(min_length=1, max_length=10_000)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = Field(default=None, max_length=200)  # the SDK's spelling
    tools: list[ClientTool] | None = None


def parse_body(fields: dict[str, Any]) -> ChatBody:
    """The request's body (BodyValidationError, 422, naming what is wrong)."""
    try:
        return ChatBody.model_validate(fields)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        error = BodyValidationError(f"invalid chat request: {where}: {first['msg']}")
        error.param = where
        raise error from None


def user_content(message: UIMessage) -> UserContent:
    """The run's message for a user message: its text, or content parts when it carries files."""
    texts: list[str] = []
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(message.parts):
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise ValidationError(f"messages[-1].parts[{i}]: a text part needs its text")
            texts.append(text)
            parts.append({"type": "text", "text": text})
        elif kind == "file":
            parts.append(_file(part, i))
        elif kind == "step-start" or (isinstance(kind, str) and kind.startswith("data-")):
            continue  # the page's own bookkeeping and data: not for the model
        else:
            raise ValidationError(
                f"messages[-1].parts[{i}]: a {kind!r} part is not taken in a user message; send text and files"
            )
    if all(p["type"] == "text" for p in parts):
        return "".join(texts)
    return parts


def _file(part: dict[str, Any], i: int) -> dict[str, Any]:
    url, media = part.get("url"), part.get("mediaType")
    if not isinstance(url, str) or not isinstance(media, str):
        raise ValidationError(f"messages[-1].parts[{i}]: a file part needs its url and mediaType")
    if media.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": url}}
    if not url.startswith("data:"):
        raise ValidationError(
            f"messages[-1].parts[{i}]: a {media} file is taken as a data URL (the model cannot fetch {url[:60]!r})"
        )
    name = part.get("filename") if isinstance(part.get("filename"), str) and part.get("filename") else "file"
    return {"type": "file", "file": {"filename": name, "file_data": url}}


def tool_parts(message: UIMessage) -> dict[str, dict[str, Any]]:
    """The tool parts of an assistant message, by call id (``tool-<name>`` and ``dynamic-tool`` parts)."""
    found: dict[str, dict[str, Any]] = {}
    for part in message.parts:
        kind = part.get("type")
        if isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool"):
            cid = part.get("toolCallId")
            if isinstance(cid, str):
                found[cid] = part
    return found


def answers(message: UIMessage, pending: list[ToolCall]) -> list[Decision] | None:
    """The decisions an assistant message carries for the run's pending calls: an ``approval-responded`` part
    approves (with its input, when the page edited it) or denies (its ``reason`` the note); an
    ``output-available`` / ``output-error`` part answers a call of the page's own tool. None when it answers none
    of them (the message is not an answer)."""
    parts = tool_parts(message)
    decisions: list[Decision] = []
    for call in pending:
        part = parts.get(call.id)
        if part is None:
            continue
        state = part.get("state")
        if call.pause_reason == "client_tool":
            if state == "output-available":
                output = part.get("output")
                decisions.append(Decision(call.id, result=output if isinstance(output, str) else json.dumps(output)))
            elif state == "output-error":
                decisions.append(Decision(call.id, result=f"Error: {part.get('errorText') or 'the tool failed'}"))
            continue
        approval = part.get("approval")
        if state not in ("approval-responded", "output-denied") or not isinstance(approval, dict):
            continue
        if approval.get("approved") is True:
            edited = part.get("input")
            args = edited if isinstance(edited, dict) and edited != call.args else None
            decisions.append(Decision(call.id, True, None, args))
        else:
            reason = approval.get("reason")
            decisions.append(Decision(call.id, False, reason if isinstance(reason, str) and reason else None))
    return decisions or None
