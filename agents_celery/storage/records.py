"""What crosses to and from the run's two busiest scripts, by name: the ARGV of ``lua/commit.lua`` and
``lua/claim.lua`` (:class:`CommitArgs`, :class:`ClaimArgs`: fields named and ordered as the locals each script
names its ARGV by, which tests/test_store.py checks) and the claim's reply (:class:`ClaimReply`). Each is built or
parsed here and nowhere else; :mod:`agents_celery.storage.store` makes the calls. Keys: the run's, in
:mod:`agents_celery.storage.keys`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .eventlog import LogStatus
from .ledger import Effect, parse_effect
from .replies import as_text


@dataclass(frozen=True)
class ClaimArgs:
    """``lua/claim.lua``'s ARGV, by the names the script gives them."""

    token: str
    step: int
    ttl_ms: int
    #: The STEP_STARTED a first attempt writes: of a model turn, of a tool step (the run's ``next_kind`` picks).
    model_started: str
    tools_started: str
    #: The version of the state the caller holds ('' for none): the reply leaves the state out if it is Redis's.
    known_state_id: str = ""

    def argv(self) -> list[str]:
        return [
            self.token,
            str(self.step),
            str(self.ttl_ms),
            self.model_started,
            self.tools_started,
            self.known_state_id,
        ]


@dataclass(frozen=True)
class ClaimReply:
    """``lua/claim.lua``'s reply, read by name (the script's header lists it): only an ``OK`` one has more."""

    outcome: str
    attempt: int = 0
    #: The first offset of this step's first attempt ('' in the reply: none yet).
    step_offset: int | None = None
    next_offset: int = 0
    #: The state JSON, '' when the caller named the version Redis holds (``known_state_id``).
    state_json: str = ""
    stop_reason: str = ""
    effects: dict[str, Effect | None] = field(default_factory=dict)
    #: The run's messages list, sent with the state (schema 2 keeps the conversation there).
    messages: list[Any] = field(default_factory=list)
    inbox: int = 0
    blips: int = 0
    advanced: int = 0

    @classmethod
    def parse(cls, reply: Any) -> ClaimReply:
        outcome = as_text(reply[0])
        if outcome != "OK":
            return cls(outcome)
        (_, attempt, step_offset, next_offset, state_json, stop, ids, entries, messages, inbox, blips, advanced) = reply
        return cls(
            outcome,
            attempt=int(as_text(attempt)),
            step_offset=int(as_text(step_offset)) if as_text(step_offset) else None,
            next_offset=int(as_text(next_offset)),
            state_json=as_text(state_json),
            stop_reason=as_text(stop),
            effects={as_text(i): parse_effect(as_text(e)) for i, e in zip(ids or [], entries or [], strict=True)},
            messages=messages or [],
            inbox=int(inbox),
            blips=int(as_text(blips)),
            advanced=int(as_text(advanced)),
        )


@dataclass(frozen=True)
class CommitArgs:
    """``lua/commit.lua``'s ARGV, by the names the script gives them (its header says what each means); then
    the messages to append and the events. :meth:`argv` is the one place they are put in order."""

    token: str
    expected_step: int
    new_step: int
    state_json: str
    log_status: LogStatus
    retention_ms: int
    tombstone_ms: int
    release: bool
    next_kind: str
    now_ms: int
    state_id: str
    #: The next step's task message, pushed with the commit (the broker is this Redis), or ''.
    task_message: str = ""
    #: JSON list of the tool call ids the next tool step's claim starts, or '' (the run is not live).
    ledger_calls: str = ""
    #: Elements of the messages list to keep (-1: all; 0: none).
    keep: int = -1
    #: The delivery tag of the step's own message, acked with the commit, or ''.
    ack_tag: str = ""
    #: The Celery task committing (the parent of the run's next step message), or ''.
    task_id: str = ""
    #: Inbox messages the state took in: checked when the run completes (None: not checked).
    inbox_taken: int | None = None
    #: The child runs the next step waits for ('=' then their ids joined by ','; '=' alone: none), or '' (as is).
    awaiting: str = ""
    messages: Sequence[str] = ()
    events: Sequence[str] = ()

    def argv(self) -> list[str]:
        return [
            self.token,
            str(self.expected_step),
            str(self.new_step),
            self.state_json,
            self.log_status,
            str(self.retention_ms),
            str(self.tombstone_ms),
            "1" if self.release else "0",
            self.next_kind,
            str(self.now_ms),
            self.state_id,
            self.task_message,
            self.ledger_calls,
            str(self.keep),
            str(len(self.messages)),
            self.ack_tag,
            self.task_id,
            "" if self.inbox_taken is None else str(self.inbox_taken),
            self.awaiting,
            *self.messages,
            *self.events,
        ]
