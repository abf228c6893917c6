"""Models: anything that streams one assistant turn from a list of Chat Completions messages.

A model yields :data:`ModelChunk` values (text deltas, tool call deltas, usage) and raises
:class:`~agents_celery.errors.ModelError` on failure, with ``retryable`` set. A model never retries by itself:
the engine retries, with backoff, and records each attempt.

- :class:`OpenAIChat` talks to OpenAI or any OpenAI-compatible server (vLLM, Ollama, LiteLLM...).
- :class:`ScriptedModel` replays scripted turns offline, for tests and demos.
- :class:`TurnAccumulator` assembles a streamed turn into an assistant message.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .errors import ConfigurationError, ModelError

if TYPE_CHECKING:
    # openai is imported where it is used: it takes about half a second, which a worker serving only
    # scripted models, or a CLI command, should not pay.
    import openai

__all__ = [
    "STOP_READING",
    "Model",
    "ModelChunk",
    "OpenAIChat",
    "ScriptedModel",
    "ScriptedToolCall",
    "ScriptedTurn",
    "TextDelta",
    "ToolCallDelta",
    "TurnAccumulator",
    "Usage",
]

_TOKEN_RE = re.compile(r"\S+\s*|\s+")
#: Statuses worth retrying, as the openai SDK's own retry logic has them.
_RETRYABLE_STATUSES = frozenset({408, 409, 429})


@dataclass(frozen=True)
class TextDelta:
    """A piece of the assistant's text."""

    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of one tool call. ``id`` and ``name`` come on the first delta of a call; ``arguments`` is JSON text."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True)
class Usage:
    """Token counts of one model call."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


ModelChunk = TextDelta | ToolCallDelta | Usage


@runtime_checkable
class Model(Protocol):
    """Streams one assistant turn.

    ``messages`` are Chat Completions message dicts; ``tools`` are :meth:`Tool.openai_schema` dicts and may be
    empty. A model whose ``stream`` takes a ``response_format`` keyword is passed one (Chat Completions'
    ``{"type": "json_schema", ...}``) when the run asks for structured output; any other is told the schema in
    its system prompt. Failures raise :class:`~agents_celery.errors.ModelError`. A model that reads a network stream may
    look at :data:`STOP_READING` between reads: when it is set and returns True, the caller no longer wants the
    turn, and the model should stop reading and return.
    """

    @property
    def name(self) -> str:
        """A short description such as ``"openai:gpt-4o-mini"``."""
        ...

    def stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Iterator[ModelChunk]:
        """Yield the chunks of the next assistant turn."""
        ...


class TurnAccumulator:
    """Assembles streamed chunks into one assistant turn.

    Example::

        acc = TurnAccumulator()
        for chunk in model.stream(messages, tools):
            acc.add(chunk)
        messages.append(acc.assistant_message())
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, dict[str, str]] = {}
        self._missing_ids: set[int] = set()
        self.usage = Usage()

    def add(self, chunk: ModelChunk) -> None:
        """Take in one chunk."""
        if isinstance(chunk, TextDelta):
            self._text.append(chunk.text)
        elif isinstance(chunk, ToolCallDelta):
            self._add_call_delta(chunk)
        else:
            # The last usage report wins: some servers send running totals.
            self.usage = chunk

    def _add_call_delta(self, delta: ToolCallDelta) -> None:
        call = self._calls.get(delta.index)
        if call is None:
            # A server that sends no id still needs one unique per call: results are keyed by it.
            call = self._calls[delta.index] = {
                "id": delta.id or f"call_{uuid.uuid4().hex[:24]}",
                "name": "",
                "arguments": "",
            }
            if not delta.id:
                self._missing_ids.add(delta.index)
        elif delta.id and delta.index in self._missing_ids:
            call["id"] = delta.id
            self._missing_ids.discard(delta.index)
        if delta.name and not call["name"]:
            call["name"] = delta.name
        call["arguments"] += delta.arguments

    @property
    def text(self) -> str:
        """The text so far."""
        return "".join(self._text)

    @property
    def tool_calls(self) -> list[dict[str, str]]:
        """The tool calls so far, in index order: ``{"id", "name", "arguments"}`` each."""
        return [dict(self._calls[index]) for index in sorted(self._calls)]

    def assistant_message(self) -> dict[str, Any]:
        """The turn as a Chat Completions assistant message."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        calls = self.tool_calls
        if calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls
            ]
        return message


class OpenAIChat:
    """A Chat Completions model, from OpenAI or any OpenAI-compatible server.

    Only the constructor arguments are kept; the SDK client is built on first use, so the object is cheap to
    create and can be rebuilt on a worker.

    Args:
        model: Model name sent to the server.
        base_url: Server URL such as ``"http://localhost:11434/v1"``; ``None`` means OpenAI
            (or ``OPENAI_BASE_URL``).
        api_key: API key; defaults to ``OPENAI_API_KEY``, else a placeholder for servers that need none.
        timeout: Seconds allowed for one request.
        temperature: Sampling temperature; ``None`` leaves the server's default.
        max_tokens: Cap on generated tokens; ``None`` leaves the server's default.
        extra_body: Extra JSON fields merged into each request body.
    """

    def __init__(
        self,
        model: str = "gpt-4o-mini",
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = timeout
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body) if extra_body else None
        self._client: openai.OpenAI | None = None

    @property
    def name(self) -> str:
        """``"openai:<model>"``."""
        return f"openai:{self.model}"

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def describe(self) -> dict[str, Any]:
        """What a worker publishes about the model (no secrets)."""
        return {"provider": "openai", "model": self.model, "base_url": self.base_url}

    def close(self) -> None:
        """Close the HTTP client if one was built; the next call builds a new one."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        response_format: dict[str, Any] | None = None,
    ) -> Iterator[ModelChunk]:
        """Stream one assistant turn.

        Args:
            messages: Chat Completions messages.
            tools: Tool schemas; when empty no ``tools`` field is sent.
            response_format: Chat Completions ``response_format`` (structured output); None sends none.

        Yields:
            Text deltas, tool call deltas, then the usage.

        Raises:
            ModelError: The request failed, before or during streaming; ``retryable`` and ``status_code`` say how.
        """
        import openai

        # The SDK makes the request: auth, base URL, headers, timeout and status errors. It goes through
        # `client.post`, the SDK's public call for any route, with the body as built: the typed `create` walks the
        # whole body against its TypedDicts each turn (3 ms of CPU for ten messages and five tools here), and
        # the body here is plain JSON already. The stream's lines are read raw: a pydantic model per chunk cost
        # about 0.2 ms of token latency, four times the rest.
        client = self._get_client()
        body = self._request(messages, tools, response_format)
        try:
            response: Any = client.post("/chat/completions", cast_to=_response_type(), body=body, stream=True)
            try:
                for data in _sse_data(response.iter_lines()):
                    yield from _chunk_deltas(data)
            finally:
                response.close()
        except openai.OpenAIError as exc:
            raise _model_error(self.name, self.timeout, exc) from exc
        except (OSError, ValueError) as exc:  # a garbled stream: worth another try
            raise ModelError(f"{self.name}: bad stream: {exc}", retryable=True) from exc
        except Exception as exc:
            # Read while streaming, the transport's own errors (httpx or httpx2) are not wrapped by the SDK.
            if type(exc).__module__.split(".")[0] not in _TRANSPORT_MODULES:
                raise
            raise ModelError(f"{self.name}: connection failed while streaming: {exc}", retryable=True) from exc

    def _get_client(self) -> openai.OpenAI:
        if self._client is None:
            import openai

            self._client = openai.OpenAI(
                base_url=self.base_url,
                api_key=self.api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
                max_retries=0,  # the engine retries, and records each attempt
                timeout=self.timeout,
                http_client=_http_client(),
            )
        return self._client

    def _request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], response_format: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            request["tools"] = tools
        if response_format is not None:
            request["response_format"] = response_format
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.max_tokens is not None:
            request["max_tokens"] = self.max_tokens
        if self.extra_body:
            request.update(self.extra_body)  # merged into the body, as the SDK's extra_body is
        return request


_TRANSPORT_MODULES = {"httpx", "httpx2", "httpcore", "httpcore2"}

#: Connections the SDK's HTTP client keeps open between requests. The SDK keeps 100 of its 1,000: on a gevent
#: worker with a thousand runs streaming, most turns then paid a new TCP connection.
KEEPALIVE_CONNECTIONS = 1000


@functools.cache
def _http_module() -> Any:
    """The HTTP library the installed openai SDK is built on: httpx before 3.0, httpx2 since (the public
    ``openai.DefaultHttpxClient`` is a client class of it)."""
    import importlib

    import openai

    for base in openai.DefaultHttpxClient.__mro__:
        top = base.__module__.split(".")[0]
        if top in ("httpx", "httpx2"):
            return importlib.import_module(top)
    raise ImportError("openai.DefaultHttpxClient is built on neither httpx nor httpx2")  # pragma: no cover


def _response_type() -> type:
    """What ``client.post(..., cast_to=...)`` takes for a response the SDK does not parse."""
    response: type = _http_module().Response
    return response


def _http_client() -> Any:
    """The SDK's own default HTTP client (its timeouts, redirects and transport), keeping more connections."""
    import openai

    limits = _http_module().Limits(max_connections=1000, max_keepalive_connections=KEEPALIVE_CONNECTIONS)
    return openai.DefaultHttpxClient(limits=limits)


#: The model adapter's stop signal: the one ambient value of a model call, declared here and nowhere else. The
#: engine sets it around each model call (:func:`reading_until`, on the thread that reads the model) to a function
#: that returns True once the caller no longer wants the stream (a stop, a lost lease, a walked-away turn); it is
#: None outside a call. A model may look at it between reads (see :class:`Model`); :class:`OpenAIChat` does on
#: every line, keep-alive comments included, so a server that only sends those cannot keep the read going.
STOP_READING: ContextVar[Callable[[], bool] | None] = ContextVar("agents_celery_stop_reading", default=None)


@contextmanager
def reading_until(unwanted: Callable[[], bool]) -> Iterator[None]:
    """Set :data:`STOP_READING` to ``unwanted`` for the block (the engine's model call), then restore it."""
    token = STOP_READING.set(unwanted)
    try:
        yield
    finally:
        STOP_READING.reset(token)  # the call thread serves other calls next


def _sse_data(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON payloads of a Chat Completions event stream, up to ``[DONE]`` (or until the caller stops)."""
    import openai

    stop = STOP_READING.get()
    for line in lines:
        if stop is not None and stop():
            return  # the response closes with the ``with`` block around this read
        if not line.startswith("data:"):
            continue  # blank separators, comments, event: lines
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        data = json.loads(payload)
        if isinstance(data, dict) and data.get("error"):
            error = data["error"]
            message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
            raise openai.APIError(message, request=None, body=error)  # type: ignore[arg-type]
        if isinstance(data, dict):
            yield data


def _chunk_deltas(chunk: dict[str, Any]) -> Iterator[ModelChunk]:
    """The deltas of one streamed Chat Completions chunk (first choice only)."""
    for choice in (chunk.get("choices") or [])[:1]:
        delta = choice.get("delta") or {}
        if delta.get("content"):
            yield TextDelta(delta["content"])
        for position, call in enumerate(delta.get("tool_calls") or ()):
            function = call.get("function") or {}
            index = call.get("index")
            yield ToolCallDelta(
                # Some compatible servers leave out the index; the position is then the best guess.
                index=index if isinstance(index, int) else position,
                id=call.get("id") or None,
                name=function.get("name") or None,
                arguments=function.get("arguments") or "",
            )
    usage = chunk.get("usage")
    if usage:
        yield Usage(
            prompt_tokens=usage.get("prompt_tokens") or 0,
            completion_tokens=usage.get("completion_tokens") or 0,
            total_tokens=usage.get("total_tokens") or 0,
        )


def _model_error(model_name: str, timeout: float, exc: Exception) -> ModelError:
    """Map an openai SDK exception to a ModelError that says whether a retry may help."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return ModelError(f"{model_name}: request timed out after {timeout}s", retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f" ({cause})" if cause else ""
        return ModelError(f"{model_name}: cannot connect to the server{detail}", retryable=True)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retryable = status in _RETRYABLE_STATUSES or status >= 500
        message = _server_message(exc)
        return ModelError(f"{model_name}: HTTP {status}: {message}", retryable=retryable, status_code=status)
    if isinstance(exc, openai.APIResponseValidationError):
        return ModelError(f"{model_name}: unexpected response: {exc}", retryable=False, status_code=exc.status_code)
    if isinstance(exc, openai.APIError):
        # An error event in the middle of a stream: the server gave up on this turn.
        return ModelError(f"{model_name}: error while streaming: {_server_message(exc)}", retryable=True)
    return ModelError(f"{model_name}: {type(exc).__name__}: {exc}", retryable=False)


def _server_message(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    if isinstance(body, str) and body:
        return body[:500]
    return exc.message


@dataclass(frozen=True)
class ScriptedToolCall:
    """A tool call a :class:`ScriptedModel` makes.

    Attributes:
        name: Tool name.
        arguments: Arguments as a dict or a JSON string (an invalid string exercises argument errors).
        id: Call id; by default ``call_<turn>_<i>``.
    """

    name: str
    arguments: dict[str, Any] | str
    id: str | None = None

    def arguments_json(self) -> str:
        """The arguments as JSON text."""
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class ScriptedTurn:
    """One scripted assistant turn: text, then tool calls."""

    text: str = ""
    tool_calls: Sequence[ScriptedToolCall] = ()


def as_turn(turn: ScriptedTurn | str) -> ScriptedTurn:
    """A turn given as a bare string is a text-only turn."""
    return ScriptedTurn(text=turn) if isinstance(turn, str) else turn


def turn_index(messages: Sequence[dict[str, Any]]) -> int:
    """Which scripted turn comes next: the number of assistant messages after the last user message.

    So a run that goes model -> tools -> model takes turn 0 then turn 1, and the next user message of the same
    session starts again at turn 0. A message that sent a failed structured output back to the model
    (:data:`agents_celery.output.RETRY_PREFIX`) is not the user's: the retried answer is the next turn.
    """
    from .output import RETRY_PREFIX

    count = 0
    for message in reversed(messages):
        role = message.get("role")
        content = message.get("content")
        if role == "user" and not (isinstance(content, str) and content.startswith(RETRY_PREFIX)):
            break
        if role == "assistant":
            count += 1
    return count


def split_tokens(text: str) -> list[str]:
    """Split text into word-like tokens that keep their trailing whitespace; joined they give ``text`` back."""
    return _TOKEN_RE.findall(text)


def word_count(messages: Sequence[dict[str, Any]]) -> int:
    """Whitespace-separated words in the string contents of ``messages`` (a stand-in for prompt tokens)."""
    # One join and one split (in C) instead of a split per message: the count is the same.
    return len(" ".join(c for m in messages if isinstance(c := m.get("content"), str)).split())


class ScriptedModel:
    """An offline, deterministic model that plays back scripted turns.

    The turn played is the number of assistant messages after the last user message (see :func:`turn_index`);
    past the end of the script the last turn repeats. Text streams word by word, tool calls stream their
    arguments in two halves, then usage in words.

    Args:
        turns: The script; a string is a text-only turn.
        token_delay: Seconds slept before each text token (to look like a real model).
        name: Name the model reports.

    Raises:
        ConfigurationError: The script is empty.
    """

    def __init__(
        self, turns: Sequence[ScriptedTurn | str], *, token_delay: float = 0.0, name: str = "scripted"
    ) -> None:
        if not turns:
            raise ConfigurationError("ScriptedModel needs at least one turn")
        self.turns = [as_turn(turn) for turn in turns]
        self.token_delay = token_delay
        self._name = name

    @property
    def name(self) -> str:
        """The name given at construction (``"scripted"`` by default)."""
        return self._name

    def __repr__(self) -> str:
        return f"ScriptedModel({len(self.turns)} turns, name={self._name!r})"

    def describe(self) -> dict[str, Any]:
        """What a worker publishes about the model."""
        return {"provider": "scripted", "name": self._name, "turns": len(self.turns)}

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        response_format: dict[str, Any] | None = None,
    ) -> Iterator[ModelChunk]:
        """Stream the scripted turn that ``messages`` call for.

        Args:
            messages: Chat Completions messages (only roles and string contents are read).
            tools: Ignored.
            response_format: Ignored (script the JSON the turn answers).

        Yields:
            Text deltas, tool call deltas, then the usage.
        """
        index = turn_index(messages)
        turn = self.turns[min(index, len(self.turns) - 1)]
        for token in split_tokens(turn.text):
            if self.token_delay:
                time.sleep(self.token_delay)
            yield TextDelta(token)
        completion = len(turn.text.split())
        for i, call in enumerate(turn.tool_calls):
            arguments = call.arguments_json()
            half = len(arguments) // 2
            yield ToolCallDelta(index=i, id=call.id or f"call_{index}_{i}", name=call.name, arguments=arguments[:half])
            yield ToolCallDelta(index=i, id=None, name=None, arguments=arguments[half:])
            completion += len(arguments.split())
        prompt = word_count(messages)
        yield Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
