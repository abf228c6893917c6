"""OpenAIChat: a Chat Completions model, from OpenAI or any OpenAI-compatible server (vLLM, Ollama, LiteLLM...).

The ``openai`` package is imported where it is used: it takes about half a second, which a worker serving only
scripted models, or a CLI command, should not pay.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ModelError
from .base import STOP_READING, ModelChunk, TextDelta, ToolCallDelta, Usage

if TYPE_CHECKING:
    import openai

__all__ = ["OpenAIChat"]

#: Statuses worth retrying, as the openai SDK's own retry logic has them.
_RETRYABLE_STATUSES = frozenset({408, 409, 429})


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
        self._clients = _Clients(self._new_client)

    @property
    def name(self) -> str:
        """``"openai:<model>"``."""
        return f"openai:{self.model}"

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_clients"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._clients = _Clients(self._new_client)

    def describe(self) -> dict[str, Any]:
        """What a worker publishes about the model (no secrets)."""
        return {"provider": "openai", "model": self.model, "base_url": self.base_url}

    def close(self) -> None:
        """Close the HTTP clients built so far; the next call builds a new one."""
        self._clients.close()

    def warm_up(self) -> None:
        """Load what the first turn would otherwise load: the openai SDK (about a second of CPU to import) and
        the process's TLS context. A worker calls it as it starts, before its pool forks, so no run's first turn
        waits for it and prefork children share the loaded modules."""
        _response_type()
        _tls_context()

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
        body = self._request(messages, tools, response_format)
        client, slot = self._clients.take()
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
        finally:
            self._clients.give(slot)

    def _new_client(self) -> openai.OpenAI:
        import openai

        return openai.OpenAI(
            base_url=self.base_url,
            api_key=self.api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
            max_retries=0,  # the engine retries, and records each attempt
            timeout=self.timeout,
            http_client=_http_client(),
        )

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

#: Streams one SDK client carries at once before the next one is used. httpcore looks at every connection of its
#: pool on each request and at each response's end: one pool for a gevent worker's thousand streams cost 5.9% of
#: its CPU (py-spy, #44). Turns go to the first client with room, so a quiet worker keeps reusing one client's
#: connection (a remote API's TLS handshake is paid once, its keep-alive is not left to expire on a rotation).
STREAMS_PER_CLIENT = 64


class _Clients:
    """The SDK clients of one model: a turn takes the first with fewer than :data:`STREAMS_PER_CLIENT` streams
    open (built when first needed), and gives its slot back at its end."""

    def __init__(self, build: Any) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._clients: list[Any] = []
        self._open: list[int] = []
        self._generation = 0  # a slot taken before a close is not given back to the clients after it

    def take(self) -> tuple[Any, tuple[int, int]]:
        with self._lock:
            slot = next((i for i, n in enumerate(self._open) if n < STREAMS_PER_CLIENT), len(self._open))
            if slot == len(self._open):
                self._open.append(0)
                self._clients.append(None)
            self._open[slot] += 1
            client, taken = self._clients[slot], (self._generation, slot)
        if client is None:  # built outside the lock (about 20 ms); two turns racing here keep the first one's
            try:
                built = self._build()
            except BaseException:
                self.give(taken)
                raise
            with self._lock:
                if taken[0] != self._generation:
                    client = built  # closed meanwhile: this turn keeps a client of its own
                else:
                    client = self._clients[slot] = self._clients[slot] or built
            if client is not built:
                built.close()
        return client, taken

    def give(self, taken: tuple[int, int]) -> None:
        with self._lock:
            if taken[0] == self._generation:
                self._open[taken[1]] -= 1

    def close(self) -> None:
        with self._lock:
            clients, self._clients, self._open = self._clients, [], []
            self._generation += 1
        for client in clients:
            if client is not None:
                client.close()


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
    """The SDK's own default HTTP client (its timeouts, redirects and transport), keeping more connections, on
    the process's one TLS context (:func:`_tls_context`)."""
    import openai

    limits = _http_module().Limits(max_connections=1000, max_keepalive_connections=KEEPALIVE_CONNECTIONS)
    return openai.DefaultHttpxClient(limits=limits, verify=_tls_context())


@functools.cache
def _tls_context() -> Any:
    """One TLS context for every SDK client of the process, as the HTTP library builds it by default (its CA
    bundle, ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``). Left to itself it builds one per client, loading the CA
    bundle each time: 26 ms of CPU per client here, paid by a model's first turn and by each client a gevent
    worker adds per 64 streams. True (the library's default) when the library has no public builder."""
    build = getattr(_http_module(), "create_ssl_context", None)
    return build() if build is not None else True


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
