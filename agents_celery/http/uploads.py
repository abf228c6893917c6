"""A run's message from an HTTP body: the ``message`` field (text or content parts) and the multipart ``files``
field, as Agno's AgentOS takes them: an image becomes an ``image_url`` part (a data URL), any other file (a PDF,
a CSV ...) a ``file`` part with its name (:mod:`agents_celery.content`)."""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Sequence
from typing import Any

from ..content import UserContent
from ..errors import BodyValidationError
from .messages import Upload


def media_type(upload: Upload) -> str:
    """The upload's media type: as sent, else guessed from its name, else ``application/octet-stream``."""
    sent = upload.content_type.split(";", 1)[0].strip().lower()
    if sent and sent != "application/octet-stream":
        return sent
    return mimetypes.guess_type(upload.filename)[0] or "application/octet-stream"


def part_of(upload: Upload) -> dict[str, Any]:
    """The content part of one uploaded file."""
    kind = media_type(upload)
    url = f"data:{kind};base64,{base64.b64encode(upload.data).decode()}"
    if kind.startswith("image/"):  # its file name stays with the run's record of the part, not the model's
        named = {"filename": upload.filename} if upload.filename else {}
        return {"type": "image_url", "image_url": {"url": url}, **named}
    return {"type": "file", "file": {"filename": upload.filename or "file", "file_data": url}}


def message_of(message: UserContent | None, uploads: Sequence[Upload]) -> UserContent:
    """The message a run starts with: ``message`` alone, or its text (or parts) followed by the uploaded files."""
    if not uploads:
        if message is None:
            raise BodyValidationError("invalid request body: message: give a message (text or content parts)")
        return message
    text = [{"type": "text", "text": message}] if message else []
    head = list(message) if isinstance(message, list) else text
    return [*head, *(part_of(u) for u in uploads)]


def part_bytes(part: dict[str, Any]) -> tuple[str, bytes, str | None]:
    """A stored part's media type, data and file name (its data URL decoded)."""
    if part.get("type") == "image_url":
        url, name = str(part["image_url"]["url"]), None
    else:
        url, name = str(part["file"].get("file_data") or ""), part["file"].get("filename")
    head, _, payload = url.partition(",")
    kind = head.removeprefix("data:").split(";", 1)[0] or "application/octet-stream"
    return kind, base64.b64decode(payload), name
