"""The Runtime calls the CLI makes, over the HTTP API, for ``agents-celery run/tail/show/stop --url``.

The CLI drives a run the same way whether it reaches Redis directly (:class:`~agents_celery.Runtime`)
or an API process over HTTP (this module, on :class:`~agents_celery.client.Client`, which reconnects from
the last offset by itself).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from .client import Client
from .events import Event
from .runs import RunStatus, ToolCall
from .runtime import RunView


def view_from_json(data: dict[str, Any]) -> RunView:
    """A RunView from ``GET /runs/<id>``."""
    return RunView(
        run_id=data["run_id"],
        agent_id=data["agent_id"],
        session_id=data["session_id"],
        status=RunStatus(data["status"]),
        last_offset=int(data["last_offset"]),
        output=data.get("output"),
        error=data.get("error"),
        pending=[ToolCall.model_validate(c) for c in data.get("pending") or []],
        stop_requested=bool(data.get("stop_requested")),
        usage=data.get("usage") or {},
        created_at=int(data.get("created_at") or 0),
    )


class RemoteStream:
    """A run's handle: its ids, and its events after an offset."""

    def __init__(self, client: Client, run_id: str, agent_id: str, session_id: str | None) -> None:
        self.client, self.id, self.agent_id, self.session_id = client, run_id, agent_id, session_id

    def events(self, offset: int | None = None, *, until_pause: bool = True) -> Iterator[Event]:
        after = -1 if offset is None else offset
        return iter(self.client.follow(self.id, self.agent_id, after=after, until_pause=until_pause))


class RemoteRuntime:
    """``stream``, ``get_stream``, ``get``, ``continue_run``, ``stop`` and ``close`` over the HTTP API."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None) -> None:
        self.client = Client(base_url, api_key=api_key)

    def stream(self, agent: str, message: str, *, session_id: str | None = None) -> RemoteStream:
        started = self.client.start(agent, message, session_id=session_id)
        return RemoteStream(self.client, started.run_id, agent, started.session_id)

    def get_stream(self, run_id: str) -> RemoteStream:
        view = self.get(run_id)
        return RemoteStream(self.client, run_id, view.agent_id, view.session_id)

    def get(self, run_id: str) -> RunView:
        return view_from_json(self.client.get(run_id))

    def continue_run(self, run_id: str, decisions: Sequence[dict[str, Any]] | None = None) -> None:
        self.client.continue_run(run_id, decisions)

    def stop(self, run_id: str, reason: str = "stopped by request") -> RunView:
        self.client.stop(run_id)
        return self.get(run_id)

    def close(self) -> None:
        self.client.close()


class Stream(Protocol):
    """What the CLI uses of a run's handle (a RunStream or a RemoteStream)."""

    id: str
    agent_id: str

    def events(self, offset: int | None = None, *, until_pause: bool = True) -> Iterator[Event]: ...


class Driver(Protocol):
    """What the CLI uses of a runtime (the Runtime, or a RemoteRuntime over HTTP)."""

    def stream(self, agent: str, message: str, *, session_id: str | None = None) -> Any: ...

    def get_stream(self, run_id: str) -> Stream: ...

    def get(self, run_id: str) -> RunView: ...

    def continue_run(self, run_id: str, decisions: Sequence[dict[str, Any]] | None = None) -> Any: ...

    def stop(self, run_id: str, reason: str = ...) -> RunView: ...

    def close(self) -> None: ...
