"""What a pydantic-ai agent is given: our user messages' content parts as pydantic-ai's user content.

A user message is text or Chat Completions content parts (:mod:`agents_celery.content`); the parts become the
pydantic-ai user content its models take:

- ``text`` -> ``str``;
- ``image_url`` by URL -> ``ImageUrl`` (its ``detail`` as ``vendor_metadata``), by data URL -> ``BinaryContent``;
- ``file`` with ``file_data`` -> ``BinaryContent`` (its file name as the content's ``identifier``), with a
  ``file_id`` -> ``UploadedFile`` of the agent's model's provider.

A part whose data is stored beside the run (a reference part) is fetched first. The run's state keeps
pydantic-ai's message history as JSON: a ``BinaryContent`` that came from a reference part is kept there as that
reference part (:func:`stored_form`), so the data stays stored once, beside the run, and is put back before the
history is validated (:func:`restored`), as our own model turns put their parts back.
"""

from __future__ import annotations

import base64
import copy
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    UploadedFile,
    UserContent,
    UserPromptPart,
)

from ...content import data_url_bytes

#: A reference part (``{"type", "ref", "media_type", "bytes", ...}``) -> the part it stands for, as stored.
Parts = Mapping[str, dict[str, Any]]


def _data(url: str, what: str) -> tuple[str, bytes]:
    media_type, _ = data_url_bytes(url, what)  # (checked at the door: this only reads the head)
    return media_type, base64.b64decode(url.split(",", 1)[1])


def _detail(part: dict[str, Any]) -> dict[str, Any] | None:
    detail = (part.get("image_url") or {}).get("detail")
    return {"detail": detail} if detail else None


def item_of(part: dict[str, Any], provider: str) -> UserContent:
    """One content part (resolved: no reference) as pydantic-ai user content."""
    kind = part.get("type")
    if kind == "image_url":
        url = part["image_url"]["url"]
        if url.startswith("data:"):
            media_type, data = _data(url, "image_url.url")
            return BinaryContent(data, media_type=media_type, vendor_metadata=_detail(part))
        return ImageUrl(url, vendor_metadata=_detail(part))
    if kind == "file":
        file = part["file"]
        if file.get("file_data"):
            media_type, data = _data(file["file_data"], "file.file_data")
            return BinaryContent(data, media_type=media_type, identifier=file.get("filename") or None)
        return UploadedFile(file["file_id"], provider_name=provider)  # type: ignore[arg-type]
    return str(part.get("text", ""))


def _resolved(part: Any, parts: Parts) -> dict[str, Any]:
    """A part with its data: a reference part's stored part (a text part when it is no longer kept)."""
    if not isinstance(part, dict) or not isinstance(part.get("ref"), str):
        return part if isinstance(part, dict) else {"type": "text", "text": str(part)}
    found = parts.get(part["ref"])
    if found is not None:
        return found
    name = part.get("filename") or part.get("media_type") or "attachment"
    return {"type": "text", "text": f"[{name}: no longer kept]"}


class Prompt:
    """The user content of a segment's prompt, remembering which ``BinaryContent`` came from which reference part
    (so :func:`stored_form` can keep the reference, not the data)."""

    def __init__(self, parts: Parts, provider: str) -> None:
        self.parts = parts
        self.provider = provider
        #: Digest of a BinaryContent's data -> the reference part it came from.
        self.refs: dict[str, dict[str, Any]] = {}

    def content(self, content: Any) -> str | list[UserContent]:
        """A chat message's content as a pydantic-ai prompt: text as it is, parts as user content."""
        if not isinstance(content, list):
            return "" if content is None else str(content)
        out: list[UserContent] = []
        for part in content:
            item = item_of(_resolved(part, self.parts), self.provider)
            if isinstance(part, dict) and "ref" in part and isinstance(item, BinaryContent):
                self.refs[_digest(item.data)] = part
            out.append(item)
        return out

    def joined(self, contents: Sequence[Any]) -> str | list[UserContent] | None:
        """The user messages a segment takes in as one prompt (None: there are none); texts joined by a blank
        line as before, content parts kept in order, each message's after the one before."""
        if not contents:
            return None
        items = [self.content(c) for c in contents]
        if all(isinstance(i, str) for i in items):
            return "\n\n".join(str(i) for i in items)
        out: list[UserContent] = []
        for n, item in enumerate(items):
            if n:
                out.append("\n\n")
            out += [item] if isinstance(item, str) else item
        return out


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stored_form(messages: Sequence[ModelMessage], dumped: list[dict[str, Any]], prompt: Prompt) -> list[dict[str, Any]]:
    """``dumped`` (the JSON of ``messages``) with each ``BinaryContent`` of a user prompt that came from a reference
    part replaced by that reference part."""
    if not prompt.refs:
        return dumped
    out = copy.deepcopy(dumped)
    for message, data in zip(messages, out, strict=True):
        for part, part_data in zip(getattr(message, "parts", ()), data.get("parts") or [], strict=True):
            if not isinstance(part, UserPromptPart) or isinstance(part.content, str):
                continue
            for i, item in enumerate(part.content):
                ref = prompt.refs.get(_digest(item.data)) if isinstance(item, BinaryContent) else None
                if ref is not None:
                    part_data["content"][i] = ref
    return out


def restored(message: dict[str, Any], prompt: Prompt) -> ModelMessage:
    """A stored pydantic-ai message (JSON) with its reference parts put back as the user content they stand for."""
    places: list[tuple[int, int, dict[str, Any]]] = []
    data = message
    for p, part in enumerate(message.get("parts") or []):
        content = part.get("content") if part.get("part_kind") == "user-prompt" else None
        for i, item in enumerate(content if isinstance(content, list) else ()):
            if isinstance(item, dict) and "ref" in item:
                places.append((p, i, item))
    if places:
        data = copy.deepcopy(message)
        for p, i, _ in places:
            data["parts"][p]["content"][i] = ""  # validated as text, then replaced by the object
    (restored_message,) = ModelMessagesTypeAdapter.validate_python([data])
    for p, i, ref in places:
        user_part = restored_message.parts[p]
        assert isinstance(user_part, UserPromptPart) and isinstance(user_part.content, list)
        user_part.content[i] = item_of(_resolved(ref, prompt.parts), prompt.provider)
    return restored_message
