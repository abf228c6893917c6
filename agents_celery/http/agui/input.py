"""An AG-UI user message's content as the run's message: AG-UI 1.0's multimodal parts (``ag_ui.core``: ``text``,
``image`` and ``document`` with a ``data``, ``url`` or ``file`` source) become Chat Completions content parts
(:mod:`agents_celery.content`). The earlier draft's ``binary`` part (``mimeType`` with ``data``, ``url`` or ``id``,
and ``filename``) is taken too: :func:`upgrade_binary` rewrites it before the input is validated.

- ``image``: a ``data`` source becomes an ``image_url`` part with a data URL, a ``url`` source one with that URL;
- ``document``: a ``data`` source becomes a ``file`` part (``file_data``, the name from ``metadata.filename``), a
  ``file`` source a ``file`` part with its ``file_id``;
- anything else (audio, video, a document by URL, an image by file id) is refused (422): Chat Completions has
  no part that takes it.
"""

from __future__ import annotations

from typing import Any

import ag_ui.core as agui

from ...content import UserContent
from ...errors import ValidationError


def upgrade_binary(body: dict[str, Any]) -> dict[str, Any]:
    """The input with each ``binary`` part of its user messages rewritten as the 1.0 ``image``/``document`` part."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            message["content"] = [
                _upgraded(p) if isinstance(p, dict) and p.get("type") == "binary" else p for p in content
            ]
    return body


def _is_binary(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "binary"


def _upgraded(part: dict[str, Any]) -> dict[str, Any]:
    mime = str(part.get("mimeType") or "application/octet-stream")
    if part.get("data"):
        source: dict[str, Any] = {"type": "data", "value": part["data"], "mimeType": mime}
    elif part.get("url"):
        source = {"type": "url", "value": part["url"], "mimeType": mime}
    else:
        source = {"type": "file", "value": str(part.get("id") or ""), "mimeType": mime}
    meta = {"filename": part["filename"]} if part.get("filename") else None
    kind = "image" if mime.startswith("image/") else "document"
    return {"type": kind, "source": source, **({"metadata": meta} if meta else {})}


def content_of(content: Any) -> UserContent:
    """The run's message for an AG-UI user message's content (a string stays a string)."""
    if isinstance(content, str):
        return content
    return [_part(p, i) for i, p in enumerate(content or [])]


def _part(part: Any, i: int) -> dict[str, Any]:
    if isinstance(part, agui.TextInputContent):
        return {"type": "text", "text": part.text}
    kind = getattr(part, "type", None)
    source = getattr(part, "source", None)
    if kind == "image" and source is not None:
        if source.type == "data":
            return {"type": "image_url", "image_url": {"url": f"data:{source.mime_type};base64,{source.value}"}}
        if source.type == "url":
            return {"type": "image_url", "image_url": {"url": source.value}}
    if kind == "document" and source is not None:
        if source.type == "data":
            name = _filename(part) or "document"
            return {
                "type": "file",
                "file": {"filename": name, "file_data": f"data:{source.mime_type};base64,{source.value}"},
            }
        if source.type == "file":
            return {"type": "file", "file": {"file_id": source.value}}
    where = f"{kind} part" + (f" with a {source.type} source" if source is not None else "")
    raise ValidationError(
        f"user message part {i}: a {where} is not taken; send text, images (data or url source) and documents "
        "(data or file source)"
    )


def _filename(part: Any) -> str | None:
    meta = getattr(part, "metadata", None)
    name = meta.get("filename") if isinstance(meta, dict) else None
    return name if isinstance(name, str) and name else None
