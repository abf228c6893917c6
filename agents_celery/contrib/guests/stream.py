"""What a guest's model stream opened and has not closed yet, by the index its framework gives each part."""

from __future__ import annotations

from ...events import EventType, NewEvent, make_event


class OpenParts:
    """The text messages and tool calls a model unit's stream opened (TEXT_MESSAGE_START, TOOL_CALL_START), by the
    framework's part or output index; :meth:`close` ends them all when the stream stopped without its done events.
    Each guest's stream subclasses it (:mod:`..pydantic_ai.events`, :mod:`..openai_agents.events`)."""

    def __init__(self) -> None:
        #: Part index -> (kind, id) of what that part opened.
        self.open: dict[int, tuple[EventType, str]] = {}

    def _end(self, index: int) -> list[NewEvent]:
        """The end of what part ``index`` opened (nothing when it opened nothing or was ended already)."""
        opened = self.open.pop(index, None)
        if opened is None:
            return []
        kind, ident = opened
        if kind is EventType.TEXT_MESSAGE_START:
            return [make_event(EventType.TEXT_MESSAGE_END, message_id=ident)]
        return [make_event(EventType.TOOL_CALL_END, tool_call_id=ident)]

    def close(self) -> list[NewEvent]:
        """The ends of everything still open."""
        out: list[NewEvent] = []
        for index in list(self.open):
            out += self._end(index)
        return out
