"""Content parts: a user message that carries images and files beside its text (Chat Completions form).

A user message is a string or a list of parts::

    {"type": "text", "text": "What is in this picture?"}
    {"type": "image_url", "image_url": {"url": "https://..." | "data:image/png;base64,...", "detail": "low"}}
    {"type": "file", "file": {"filename": "report.pdf", "file_data": "data:application/pdf;base64,..."}}
    {"type": "file", "file": {"file_id": "file-abc"}}

:func:`check_parts` checks them against the limits (``max_part_bytes`` per part, ``max_input_bytes`` per run:
:class:`~agents_celery.errors.InputTooLargeError`, HTTP 413). :func:`stored_form` takes the data out of the
message: a part holding inline data (a data URL, a file's ``file_data``) becomes a *reference part*, the
run's conversation holds only that, and the part itself is stored once, beside the run (see
:mod:`agents_celery.storage.parts`)::

    {"type": "image_url", "ref": "<run_id>/0", "media_type": "image/png", "bytes": 48213}
    {"type": "file", "ref": "<run_id>/1", "filename": "report.pdf", "media_type": "application/pdf", "bytes": 90311}

A model turn puts the parts back (:func:`resolved`), so the model gets them in the Chat Completions form.
Parts by URL (``https://...``) and text stay inline: they are small.
"""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import InputTooLargeError, PayloadTooLargeError, UnsupportedError, ValidationError
from .settings import Settings

#: A user message as callers give it: text, or content parts.
UserContent = str | list[dict[str, Any]]

_DATA_URL = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[^;,]*)*);base64,", re.ASCII)
_DETAILS = ("auto", "low", "high")
#: The image types OpenAI's vision models take (an SVG, a TIFF, a HEIC ... is refused by the model, late).
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


@dataclass(frozen=True)
class CheckedInput:
    """A user message that passed the checks: its parts (None: plain text), and how big its data is."""

    content: UserContent
    parts: list[dict[str, Any]] | None = None
    #: Bytes of the parts' data (decoded data URLs; a URL's length).
    size: int = 0
    sizes: list[int] = field(default_factory=list)


def data_url_bytes(url: str, what: str) -> tuple[str, int]:
    """The media type and decoded size of a base64 data URL (ValidationError when it is not one)."""
    match = _DATA_URL.match(url)
    if match is None:
        raise ValidationError(f"{what} must be a base64 data URL (data:<media type>;base64,...)")
    payload = url[match.end() :]
    try:
        size = len(binascii.a2b_base64(payload, strict_mode=True))  # (exact, and twice as fast as b64decode)
    except (binascii.Error, ValueError):
        raise ValidationError(f"{what} holds invalid base64 data") from None
    return (match.group("type") or "application/octet-stream").lower(), size


def _image_size(part: dict[str, Any], where: str) -> int:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str) or not url:
        raise ValidationError(f"{where}: an image_url part needs image_url.url (an https URL or a data URL)")
    _check_name(part.get("filename"), f"{where}: filename")
    detail = image.get("detail") if isinstance(image, dict) else None
    if detail is not None and detail not in _DETAILS:
        raise ValidationError(f"{where}: image_url.detail must be one of {list(_DETAILS)}, got {detail!r}")
    if url.startswith("data:"):
        media_type, size = data_url_bytes(url, f"{where}: image_url.url")
        if media_type not in IMAGE_TYPES:
            raise ValidationError(f"{where}: an image must be one of {list(IMAGE_TYPES)}, got {media_type!r}")
        return size
    if not url.startswith(("https://", "http://")):
        raise ValidationError(f"{where}: image_url.url must be an http(s) URL or a data URL")
    return len(url.encode())


def _file_size(part: dict[str, Any], where: str) -> int:
    file = part.get("file")
    if not isinstance(file, dict):
        raise ValidationError(f"{where}: a file part needs a file object (filename and file_data, or file_id)")
    data, file_id = file.get("file_data"), file.get("file_id")
    _check_name(file.get("filename"), f"{where}: file.filename")
    if isinstance(data, str) and data:
        return data_url_bytes(data, f"{where}: file.file_data")[1]
    if isinstance(file_id, str) and file_id:
        return len(file_id.encode())
    raise ValidationError(f"{where}: a file part needs file.file_data (a base64 data URL) or file.file_id")


def _check_name(name: Any, what: str) -> None:
    if name is not None and (not isinstance(name, str) or len(name) > 255):
        raise ValidationError(f"{what} must be a string of at most 255 characters")


def _part_size(part: Any, where: str) -> tuple[int, int]:
    """(data bytes, text characters) of one part; ValidationError when it is malformed."""
    if not isinstance(part, dict):
        raise ValidationError(f"{where} must be an object with a type")
    if "ref" in part:  # reference parts are the store's own: a caller never names a stored part
        raise ValidationError(f"{where} has a 'ref'; send the image or file itself")
    kind = part.get("type")
    if kind == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise ValidationError(f"{where}: a text part needs text (a string)")
        return 0, len(text)
    if kind == "image_url":
        return _image_size(part, where), 0
    if kind == "file":
        return _file_size(part, where), 0
    raise ValidationError(f"{where} has type {kind!r}; a user message takes text, image_url and file parts")


def check_parts(message: Any, settings: Settings, already: int = 0) -> CheckedInput:
    """Check a user message (text or parts) against the limits; ``already``: bytes of parts the run holds.

    Raises:
        ValidationError: not a string or a list of well-formed parts (HTTP 422).
        InputTooLargeError: a part over ``max_part_bytes``, or the run's parts over ``max_input_bytes`` (413).
        PayloadTooLargeError: the text over ``max_message_chars`` (413).
    """
    if isinstance(message, str):
        if not message.strip():
            raise ValidationError("message must be a non-empty string")
        _check_chars(len(message), settings)
        return CheckedInput(message)
    if not isinstance(message, list) or not message:
        raise ValidationError("message must be a non-empty string or a non-empty list of content parts")
    sizes, chars = [], 0
    for i, part in enumerate(message):
        size, text = _part_size(part, f"message part {i}")
        if size > settings.max_part_bytes:
            raise InputTooLargeError(
                f"message part {i} holds {size} bytes; at most {settings.max_part_bytes} are accepted per part "
                "(AGENTS_CELERY_MAX_PART_BYTES)"
            )
        sizes.append(size)
        chars += text
    _check_chars(chars, settings)
    total = already + sum(sizes)
    if total > settings.max_input_bytes:
        raise InputTooLargeError(
            f"the run's parts hold {total} bytes; at most {settings.max_input_bytes} are accepted per run "
            "(AGENTS_CELERY_MAX_INPUT_BYTES)"
        )
    if all(p["type"] == "text" and not p["text"].strip() for p in message):
        raise ValidationError("message must not be blank")
    return CheckedInput(list(message), list(message), sum(sizes), sizes)


def check_for_framework(checked: CheckedInput, framework: str | None) -> None:
    """Refuse the parts an agent of another framework cannot be given (UnsupportedError, HTTP 400), before anything
    is created. A pydantic-ai agent takes text, images and files (``agents_celery.contrib.pydantic_ai.prompt``) but
    no video: no Chat Completions part carries one, and pydantic-ai's OpenAI models raise on it."""
    if framework != "pydantic-ai":
        return
    for i, part in enumerate(checked.parts or []):
        inline = _inline_data(part)
        if inline is not None and inline[0].startswith("video/"):
            raise UnsupportedError(
                f"message part {i} is a video ({inline[0]}); a pydantic-ai agent is given text, images and files "
                "(documents, audio) only"
            )


def _check_chars(chars: int, settings: Settings) -> None:
    if chars > settings.max_message_chars:
        most = settings.max_message_chars
        raise PayloadTooLargeError(f"the message has {chars} characters; at most {most} are accepted")


def _media_type(url: str) -> str:
    """The media type of a data URL :func:`check_parts` accepted (its head is read, not its data)."""
    match = _DATA_URL.match(url)
    return ((match.group("type") if match else None) or "application/octet-stream").lower()


def _inline_data(part: dict[str, Any]) -> tuple[str, str | None] | None:
    """(media type, file name) of a checked part that holds its data inline (None: a text or URL part)."""
    if part.get("type") == "image_url":
        url = part["image_url"]["url"]
        return (_media_type(url), part.get("filename")) if url.startswith("data:") else None
    if part.get("type") == "file":
        data = part["file"].get("file_data")
        if isinstance(data, str) and data:
            return _media_type(data), part["file"].get("filename")
    return None


def inline_count(checked: CheckedInput) -> int:
    """How many of the message's parts hold their data inline (each is stored beside the run)."""
    return sum(_inline_data(p) is not None for p in checked.parts or [])


def stored_form(checked: CheckedInput, run_id: str, first: int = 0) -> tuple[UserContent, dict[str, str]]:
    """The message as the run's conversation keeps it, and the parts to store beside the run (``ref`` -> part
    JSON). Parts are numbered from ``first`` (a run's later messages go on after its first one's parts)."""
    if checked.parts is None:
        return checked.content, {}
    content: list[dict[str, Any]] = []
    stored: dict[str, str] = {}
    n = first
    for part, size in zip(checked.parts, checked.sizes, strict=True):
        inline = _inline_data(part)
        if part.get("type") == "image_url":  # an image's file name is ours (the marker's), not the model's
            part = {k: v for k, v in part.items() if k != "filename"}
        if inline is None:
            content.append(part)
            continue
        ref = f"{run_id}/{n}"
        n += 1
        stored[ref] = json.dumps(part)
        media_type, filename = inline
        marker: dict[str, Any] = {"type": part["type"], "ref": ref, "media_type": media_type, "bytes": size}
        if filename:
            marker["filename"] = filename
        content.append(marker)
    return content, stored


def refs_in(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The references of the reference parts in ``messages``, in order, each once (also in the user prompts of a
    pydantic-ai agent's messages, whose parts keep them: ``agents_celery.contrib.pydantic_ai.prompt``)."""
    found: dict[str, None] = {}
    for message in messages:
        contents = [message.get("content")]
        if message.get("kind") == "request":
            contents = [p.get("content") for p in message.get("parts") or [] if p.get("part_kind") == "user-prompt"]
        for content in contents:
            for part in content if isinstance(content, list) else ():
                if isinstance(part, dict) and isinstance(part.get("ref"), str):
                    found[part["ref"]] = None
    return list(found)


def run_of(ref: str) -> str:
    """The run whose message a reference's part came with."""
    return ref.rpartition("/")[0]


def resolved(messages: Sequence[dict[str, Any]], parts: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each reference part replaced by its stored part (a text part says so when the part is
    no longer kept)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list) or not any(isinstance(p, dict) and "ref" in p for p in content):
            out.append(message)
            continue
        parts_out = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("ref"), str):
                found = parts.get(part["ref"])
                name = part.get("filename") or part.get("media_type") or "attachment"
                parts_out.append(found if found is not None else {"type": "text", "text": f"[{name}: no longer kept]"})
            else:
                parts_out.append(part)
        out.append({**message, "content": parts_out})
    return out


def text_of(content: Any) -> str:
    """The text of a message's content or of a tool's output, the one rule every reader uses.

    A string is its own text and None has none. A list of parts is the text of each part joined with nothing
    between: a string part as it is, a dict part its ``text`` (or, for a tool result's part, its ``content``), any
    other part nothing. Any other value (a structured prompt or output) is its JSON, so nothing given is lost.
    """
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(_part_text(part) for part in content)
    return json.dumps(content, default=str)


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return ""
    for key in ("text", "content"):
        if isinstance(part.get(key), str):
            return str(part[key])
    return ""


def shown_as(content: Any) -> str:
    """A message as the log shows it in a user message event: its text, each image or file named after it."""
    if not isinstance(content, list):
        return text_of(content)
    names = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") == "text":
            continue
        name = part.get("filename") or (part.get("file") or {}).get("filename")
        names.append(f"[file {name}]" if name else "[image]" if part.get("type") == "image_url" else "[file]")
    return " ".join(t for t in (text_of(content), *names) if t) or "[attachment]"
