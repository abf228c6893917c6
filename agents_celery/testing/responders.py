"""What the fake OpenAI server answers: :class:`FakeReply`, and the responders that pick one per request.

A *responder* maps the JSON body of a ``POST /v1/chat/completions`` request to a :class:`FakeReply`
(:class:`~agents_celery.testing.openai_server.FakeOpenAIServer` sends it, streamed or not).
:class:`ScriptResponder` picks turns with the same rule as :class:`~agents_celery.models.ScriptedModel`;
:class:`FailingResponder` injects failures; :class:`SchemaResponder` answers structured-output requests with
scripted JSON (valid, invalid, then valid...); :class:`SummaryResponder` answers a history policy's summary
requests. No HTTP here: a responder is a plain function of the request body.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..history import is_summary_request
from ..models.scripted import ScriptedToolCall, ScriptedTurn, as_turn, turn_index

__all__ = [
    "FailingResponder",
    "FakeReply",
    "Responder",
    "SchemaResponder",
    "ScriptResponder",
    "SummaryResponder",
    "format_problem",
    "retries_sent",
]


@dataclass(frozen=True)
class FakeReply:
    """What the fake server answers to one chat completion request.

    Attributes:
        text: Assistant text.
        tool_calls: Tool calls; a call without an id gets ``call_<request number>_<i>``.
        status: HTTP status; 400 and above sends an OpenAI-style error body instead of a completion.
        error: Error message for an error status (defaults to the status phrase).
        token_delay: Seconds slept before each streamed text chunk.
        chunk_words: Words per streamed text chunk.
        hang: Send SSE comments (``: ping``) every ``token_delay`` (or 0.1 s) and nothing else, until the client
            goes away: a server that never finishes its answer, yet never lets a read time out.
    """

    text: str = ""
    tool_calls: Sequence[ScriptedToolCall] = ()
    status: int = 200
    error: str | None = None
    token_delay: float = 0.0
    chunk_words: int = 1
    hang: bool = False


#: Maps a request body to the reply.
Responder = Callable[[dict[str, Any]], FakeReply]


class ScriptResponder:
    """Answers with scripted turns, chosen like :class:`~agents_celery.models.ScriptedModel` does.

    The turn is the number of assistant messages after the last user message in the request; past the end of
    the script the last turn repeats.

    Args:
        turns: The script; a string is a text-only turn.
        token_delay: Seconds slept before each streamed text chunk.
    """

    def __init__(self, turns: Sequence[ScriptedTurn | str], *, token_delay: float = 0.0) -> None:
        if not turns:
            raise ValueError("ScriptResponder needs at least one turn")
        self.turns = [as_turn(turn) for turn in turns]
        self.token_delay = token_delay

    def __call__(self, request: dict[str, Any]) -> FakeReply:
        """The reply to ``request``."""
        index = turn_index(request.get("messages") or [])
        turn = self.turns[min(index, len(self.turns) - 1)]
        calls = tuple(
            ScriptedToolCall(call.name, call.arguments, call.id or f"call_{index}_{i}")
            for i, call in enumerate(turn.tool_calls)
        )
        return FakeReply(text=turn.text, tool_calls=calls, token_delay=self.token_delay)


class SchemaResponder:
    """Answers structured-output requests (``response_format`` ``json_schema``) with scripted JSON, one answer per
    attempt: the first answer, then, after each message that sent a failed validation back
    (:data:`agents_celery.output.RETRY_PREFIX`), the next one; past the end the last repeats.

    Like OpenAI, it refuses (400) a ``strict`` schema that breaks strict mode's rules (an object without
    ``additionalProperties: false``, a property not ``required``), and, unless ``require_format`` is False, a
    request that asks for no ``json_schema`` format at all. ``formats`` holds the ``response_format`` of each
    request answered.

    Args:
        answers: Each a JSON value (sent as JSON text) or a string (sent as it is: not JSON, or JSON that breaks the
            schema). ``["{bad", {"ok": 1}]``: invalid then valid; ``["{bad"]``: never valid.
        token_delay: Seconds slept before each streamed chunk of the answer.
        require_format: Refuse a request without a ``json_schema`` ``response_format``.
    """

    def __init__(self, answers: Sequence[Any], *, token_delay: float = 0.0, require_format: bool = True) -> None:
        if not answers:
            raise ValueError("SchemaResponder needs at least one answer")
        self.answers = [a if isinstance(a, str) else json.dumps(a) for a in answers]
        self.token_delay = token_delay
        self.require_format = require_format
        self.formats: list[dict[str, Any] | None] = []
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> FakeReply:
        """The answer for the attempt ``request`` is (or a 400 naming what is wrong with its format)."""
        fmt = request.get("response_format")
        with self._lock:
            self.formats.append(fmt)
        problem = format_problem(fmt) if fmt is not None or self.require_format else None
        if problem is not None:
            return FakeReply(status=400, error=f"Invalid 'response_format': {problem}")
        attempt = retries_sent(request.get("messages") or [])
        return FakeReply(text=self.answers[min(attempt, len(self.answers) - 1)], token_delay=self.token_delay)


def retries_sent(messages: Sequence[dict[str, Any]]) -> int:
    """How many failed validations were sent back to the model since the last user message of the caller's."""
    from ..output import RETRY_PREFIX

    count = 0
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if not (isinstance(content, str) and content.startswith(RETRY_PREFIX)):
            break
        count += 1
    return count


def format_problem(fmt: Any) -> str | None:
    """What OpenAI would refuse in a ``response_format`` asking for a JSON Schema (None: nothing)."""
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return f"expected {{'type': 'json_schema', ...}}, got {fmt!r}"
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        return "json_schema.schema must be an object"
    name = spec.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name):
        return f"json_schema.name must be 1-64 letters, digits, '_' or '-', got {name!r}"
    if spec.get("strict"):
        return _strict_problem(spec["schema"], "#")
    return None


def _strict_problem(node: Any, where: str) -> str | None:
    if isinstance(node, list):
        return next((p for i, sub in enumerate(node) if (p := _strict_problem(sub, f"{where}/{i}"))), None)
    if not isinstance(node, dict):
        return None
    if node.get("type") == "object" or "properties" in node:
        if node.get("additionalProperties") is not False:
            return f"In context={where}, 'additionalProperties' is required to be supplied and to be false"
        missing = sorted(set(node.get("properties") or {}) - set(node.get("required") or []))
        if missing:
            return f"In context={where}, 'required' must include every key in properties; missing {missing}"
    for key, value in node.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            found = next((p for k, sub in value.items() if (p := _strict_problem(sub, f"{where}/{key}/{k}"))), None)
        elif key in ("items", "anyOf"):
            found = _strict_problem(value, f"{where}/{key}")
        else:
            found = None
        if found:
            return found
    return None


class FailingResponder:
    """Fails the first ``failures`` requests with ``status``, then hands requests to ``inner``.

    Args:
        inner: The responder used once the failures are spent.
        failures: How many requests fail.
        status: HTTP status of the failures.
    """

    def __init__(self, inner: Responder, failures: int, status: int = 500) -> None:
        self.inner = inner
        self.failures = failures
        self.status = status
        self._failed = 0
        self._lock = threading.Lock()

    @property
    def failed(self) -> int:
        """How many requests failed so far."""
        with self._lock:
            return self._failed

    def __call__(self, request: dict[str, Any]) -> FakeReply:
        """A failure while some are left, else ``inner``'s reply."""
        with self._lock:
            fail = self._failed < self.failures
            if fail:
                self._failed += 1
                number = self._failed
        if fail:
            return FakeReply(status=self.status, error=f"injected failure {number} of {self.failures}")
        return self.inner(request)


class SummaryResponder:
    """Answers the summary requests of a :class:`~agents_celery.history.Summarize` policy's summary step (told
    apart by :func:`~agents_celery.history.is_summary_request`) and hands every other request to ``inner``.

    Args:
        inner: The responder for the agent's own turns.
        text: The summary; default ``"Summary of <n> lines of conversation."`` (n: the transcript's lines).
        token_delay: Seconds slept before each streamed chunk of the summary (a crash test's window).
    """

    def __init__(self, inner: Responder, *, text: str | None = None, token_delay: float = 0.0) -> None:
        self.inner = inner
        self.text = text
        self.token_delay = token_delay
        self._count = 0
        self._lock = threading.Lock()

    @property
    def summaries(self) -> int:
        """How many summary requests it answered."""
        with self._lock:
            return self._count

    def __call__(self, request: dict[str, Any]) -> FakeReply:
        """A summary for a summary request, else ``inner``'s reply."""
        if not is_summary_request(request):
            return self.inner(request)
        with self._lock:
            self._count += 1
        lines = str(request["messages"][-1]["content"]).count("\n")
        text = self.text or f"Summary of {lines} lines of conversation."
        return FakeReply(text=text, token_delay=self.token_delay)
