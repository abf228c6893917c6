"""Admission: what a new run passes before it is created. Its input checked, its idempotency key turned into
its run id, and its session taken (or a place in the session's line) with the session's owner recorded.

The checks are plain functions. :class:`Admission` admits a run to its session in one round trip
(``lua/session_admit.lua``: record the owner if none, take the session if it is free or the same run holds
it, hand back the history); only when another run holds the session does it look further (is that run still
live? if it ended, heal the session it left behind and take the session from it).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from ..errors import IdempotencyKeyReusedError, PayloadTooLargeError, SessionBusyError, ValidationError
from ..runs import RunState
from ..settings import Settings
from ..storage.index import Filters
from ..storage.store import RunStore
from ..webhook import check_url

#: OpenAI's rule for function names (client tools are sent to the model as functions).
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: What a new run does when its session is busy (``Runtime.stream``'s ``multitask_strategy``).
STRATEGIES = ("reject", "enqueue", "interrupt")
#: What holds a session's active key while the session is being deleted (no run starts in it meanwhile).
DELETING = "(deleting)"

#: Refuses a session's history as it stands (HistoryMismatchError), for a run that took the session.
CheckHistory = Callable[[list[dict[str, Any]]], None]


def fingerprint(
    agent: str,
    message: str | list[dict[str, Any]],
    session_id: str | None,
    user_id: str | None,
    shaping: list[Any] | None = None,
) -> str:
    """What an idempotent call asked for: two calls with one key must agree on it. ``shaping``: what else shapes
    the run (client tools, the client's context with a Responses request's instructions, tools, text and metadata,
    an output schema); left out of the hash when all of it is empty, so the fingerprint of a plain run stays what it
    was."""
    asked: list[Any] = [agent, message, session_id, user_id]
    if shaping and any(shaping):
        asked.append(json.dumps(shaping, sort_keys=True, default=str))
    return hashlib.sha256(json.dumps(asked).encode()).hexdigest()[:32]


def idempotent_run_id(key: str, user_id: str | None) -> str:
    """The run id of the call with this Idempotency-Key (keys are scoped to their user)."""
    if not isinstance(key, str) or not key or len(key) > 255:
        raise ValidationError("Idempotency-Key must be 1 to 255 characters")
    return hashlib.sha256(json.dumps([key, user_id]).encode()).hexdigest()[:32]


def start_ms(start_after: float | None, start_at: datetime | float | None) -> int | None:
    """When a delayed run starts, in Unix ms (None: now)."""
    if start_after is not None and start_at is not None:
        raise ValidationError("give start_after or start_at, not both")
    if start_after is not None:
        if not isinstance(start_after, int | float) or not math.isfinite(start_after) or start_after < 0:
            raise ValidationError(f"start_after must be a number of seconds, 0 or more; got {start_after!r}")
        return int((time.time() + start_after) * 1000)
    if start_at is None:
        return None
    if isinstance(start_at, datetime):
        if start_at.tzinfo is None:
            raise ValidationError("start_at must carry a time zone (an aware datetime)")
        return int(start_at.timestamp() * 1000)
    if not isinstance(start_at, int | float) or not math.isfinite(start_at) or isinstance(start_at, bool):
        raise ValidationError(f"start_at must be a datetime or Unix seconds; got {start_at!r}")
    return int(start_at * 1000)


def client_tools(specs: Sequence[dict[str, Any]], manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The caller's own tools, checked: OpenAI function names, unique, none shadowing one of the agent's."""
    own = {t["name"] for t in manifest.get("tools", [])}
    out: list[dict[str, Any]] = []
    for spec in specs:
        name = spec.get("name") if isinstance(spec, dict) else None
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise ValidationError(f"a client tool needs a name of 1-64 letters, digits, '_' or '-'; got {name!r}")
        if name in own or any(t["name"] == name for t in out):
            raise ValidationError(f"client tool {name!r} is named twice (or like one of the agent's tools)")
        params = spec.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise ValidationError(f"the parameters of client tool {name!r} must be a JSON schema object")
        out.append({"name": name, "description": str(spec.get("description") or ""), "parameters": params})
    return out


def check_message(message: str, settings: Settings) -> None:
    if not isinstance(message, str) or not message.strip():
        raise ValidationError("message must be a non-empty string")
    if len(message) > settings.max_message_chars:
        most = settings.max_message_chars
        raise PayloadTooLargeError(f"the message has {len(message)} characters; at most {most} are accepted")


def check_webhook(url: str | None, settings: Settings) -> None:
    if url is not None:
        check_url(url, settings.webhook_allow)
        if not settings.webhook_secret:
            raise ValidationError("webhook_url needs AGENTS_CELERY_WEBHOOK_SECRET (webhooks are signed with it)")


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ValidationError(f"multitask_strategy must be one of {list(STRATEGIES)}, got {strategy!r}")


class Admission:
    """Idempotency and sessions for new runs, over ``store``."""

    def __init__(self, store: RunStore) -> None:
        self.store = store

    def existing(self, run_id: str, fingerprint: str, key: str) -> bool:
        """Whether an idempotent call already created ``run_id``; refused if that call asked for another thing."""
        (sent,) = self.store.run_fields(run_id, "request")
        if sent is None:
            return False
        if sent != fingerprint:
            raise IdempotencyKeyReusedError(
                f"Idempotency-Key {key!r} was used for run {run_id!r} with another agent, message, session, "
                "user, tools, instructions or output format; use a new key for a new request"
            )
        return True

    def admit(
        self,
        session_id: str,
        run_id: str,
        user_id: str | None,
        may_wait: bool,
        check: CheckHistory | None,
        own_session: bool = False,
    ) -> list[dict[str, Any]] | None:
        """Admit ``run_id`` to its session (whose owner becomes ``user_id`` unless it has one): the history the
        run starts from, or None when another run holds the session and ``may_wait`` (the run waits in line).
        ``check`` may refuse the history: the session is given back then. ``own_session``: the run was started
        without a session id, its session lives as long as the run.

        Raises:
            SessionBusyError: another run holds the session (and not ``may_wait``).
        """
        try:
            history, holder = self.store.sessions.admit(session_id, run_id, user_id, own_session)
            if history is None:
                history = self._take_from(session_id, run_id, holder)
        except SessionBusyError:
            if not may_wait:
                raise
            return None
        if check is not None:
            try:
                check(history)
            except Exception:
                self.store.sessions.release(session_id, run_id)
                raise
        return history

    def _take_from(self, session_id: str, run_id: str, holder: str) -> list[dict[str, Any]]:
        """Take the session from the run holding it if that run ended (healing what it left: its messages in the
        history); the history then. SessionBusyError while the holder is live."""
        if holder == DELETING:
            raise SessionBusyError(f"session {session_id!r} is being deleted")
        try:
            held, _ = self.store.load(holder)
        except Exception:  # gone: expired or deleted while it held the session
            held = None
        if held is not None and not held.status.is_final:
            # The holder may be another user's run: say only that the session is busy.
            raise SessionBusyError(
                f"session {session_id!r} is busy: a run of it is {held.status.value}; "
                "wait for it to end, continue it, or stop it"
            )
        if held is not None:
            self.store.sessions.sync(held)  # heals a crash between its end and the sync
        if (
            not self.store.sessions.take(session_id, run_id, holder)
            and self.store.sessions.active(session_id) != run_id
        ):
            raise SessionBusyError(f"session {session_id!r} was taken by another run just now; try again")
        return self.store.sessions.history(session_id)  # (taken, or a retry of this very call took it first)

    def line_up(self, state: RunState, strategy: str) -> str | None:
        """A run created while its session was busy goes to the end of the session's line; the live run that
        ``interrupt`` stops (None: none)."""
        self.store.sessions.wait_in_line(state.session_id, state.run_id)
        active = self.store.sessions.active(state.session_id)
        if strategy == "interrupt" and active not in (None, state.run_id, DELETING):
            return active
        return None

    def owner(self, session_id: str) -> tuple[bool, str | None]:
        """Whether the session exists with an owner, and who: the user of its first run (None: no user).

        A session kept from before owners were recorded is given the user of its newest run, once."""
        known, owner = self.store.sessions.owner(session_id)
        if known:
            return known, owner
        newest = self.store.index.page(Filters(None, None, session_id, None), 1, None, None).runs
        if not newest:
            return False, None
        return True, self.store.sessions.own(session_id, newest[0].user_id)

    def claim(self, session_id: str, user_id: str | None) -> str | None:
        """The session's owner, recording ``user_id`` as it when the session has none yet (first caller wins)."""
        known, owner = self.owner(session_id)
        return owner if known else self.store.sessions.own(session_id, user_id)
