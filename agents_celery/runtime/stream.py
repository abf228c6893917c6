"""A handle on one run's event log: :class:`RunStream`, what :meth:`Runtime.stream` returns."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Protocol

from ..errors import ValidationError
from ..events import Event, parse_position
from ..runs import RunView
from ..settings import Settings
from ..storage.connections import connect_async
from ..storage.eventlog import AsyncEventLog, check_offset
from ..storage.store import RunStore


class Reader(Protocol):
    """What a :class:`RunStream` asks of the Runtime that made it."""

    store: RunStore
    settings: Settings

    def get(self, run_id: str) -> RunView: ...


def _position(offset: int | str | None) -> tuple[int, str | None]:
    """``None`` (from the start), an offset, or ``"<offset>.<tag>"``: the offset to read after, and the tag."""
    if offset is None:
        return -1, None
    if isinstance(offset, str):
        try:
            after, tag = parse_position(offset)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        return check_offset(after, "offset"), tag
    return check_offset(offset, "offset"), None


class RunStream:
    """A handle on one run's event log. Persist ``run_id`` and the last offset you saw to reconnect later.

    The HTTP client's :class:`agents_celery.client.RunStream` has the same names: ``run_id`` (``id``),
    ``session_id``, ``agent_id``, ``events(offset)`` and ``get()``.
    """

    def __init__(self, runtime: Reader, run_id: str, session_id: str, agent_id: str) -> None:
        self.runtime = runtime
        self.run_id = run_id
        self.session_id = session_id
        self.agent_id = agent_id

    @property
    def id(self) -> str:
        """The run id (``run_id``)."""
        return self.run_id

    def events(self, offset: int | str | None = None, *, until_pause: bool = True) -> Iterator[Event]:
        """The events after ``offset`` (all when None), then live ones, until the run ends or pauses.

        Args:
            offset: Where to read after: None (from the start), an offset, or a position such as
                ``"140.1a2b3c4d"`` (an event's :attr:`~agents_celery.events.Event.position`). With a position,
                LogRewoundError says when the log no longer holds that event at 140 (Redis lost writes).
            until_pause: Whether a pause ends the iteration too. With False it follows the run until it ends.

        Returns:
            An iterator of the run's events, oldest first.

        Raises:
            ValidationError: ``offset`` is neither an offset nor a position.
            LogRewoundError: the log no longer holds the event at that position (checked before this returns).
            RunNotFoundError: no run has that id (raised when the iteration starts).
            RunExpiredError: the run existed and its retention passed (raised when the iteration starts).
        """
        after, tag = _position(offset)
        if tag is not None:
            self.runtime.store.log.verify(self.run_id, after, tag)
        return self.runtime.store.log.events(self.run_id, after, until_pause=until_pause)

    async def aevents(self, offset: int | str | None = None, *, until_pause: bool = True) -> AsyncIterator[Event]:
        """Async version of :meth:`events`.

        Args:
            offset: Where to read after, as :meth:`events` takes it.
            until_pause: Whether a pause ends the iteration too, as in :meth:`events`.

        Yields:
            The run's events, oldest first.

        Raises:
            ValidationError: ``offset`` is neither an offset nor a position.
            LogRewoundError: the log no longer holds the event at that position.
            RunNotFoundError: no run has that id.
            RunExpiredError: the run existed and its retention passed.
        """
        after, tag = _position(offset)
        # A client per call: an asyncio Redis client belongs to the event loop that created it.
        client = connect_async(self.runtime.settings.redis_url, socket_connect_timeout=2)
        try:
            log = AsyncEventLog(client, self.runtime.store.keys)
            if tag is not None:
                await log.verify(self.run_id, after, tag)
            async for event in log.events(self.run_id, after, until_pause=until_pause):
                yield event
        finally:
            await client.aclose()

    def get(self) -> RunView:
        """The run as it stands (:meth:`Runtime.get`).

        Returns:
            The run's :class:`RunView`.

        Raises:
            RunNotFoundError: no run has that id.
            RunExpiredError: the run existed and its retention passed.
        """
        return self.runtime.get(self.run_id)

    def __repr__(self) -> str:
        return f"RunStream(run_id={self.run_id!r}, agent={self.agent_id!r})"
