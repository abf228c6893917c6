"""Schedules of the :class:`~agents_celery.runtime.Runtime` (a mixin): runs started on a cron expression or
every so many seconds, fired by Celery beat (:mod:`agents_celery.broker.beat`) through
:meth:`Scheduling.fire_schedules`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..agent import Agent
from ..errors import PayloadTooLargeError, ScheduleNotFoundError, SessionBusyError, UnknownAgentError, ValidationError
from ..schedule import Schedule
from ..storage.schedules import ScheduleStore
from .reads import Inspection

log = logging.getLogger(__name__)


class Scheduling(Inspection):
    """Schedules (mixed into the Runtime, which sets ``schedule_store`` and has ``stream``)."""

    schedule_store: ScheduleStore
    #: :meth:`Runtime.stream`: starts one run.
    stream: Callable[..., Any]

    def schedule(
        self,
        agent: Agent | str,
        message: str,
        *,
        cron: str | None = None,
        every: float | None = None,
        session_id: str | None = None,
        name: str | None = None,
        user_id: str | None = None,
    ) -> Schedule:
        """Run ``agent`` with ``message`` on a cron expression (UTC) or every ``every`` seconds, from now on.

        Each tick starts one run (its idempotency key is the schedule id and the tick's time, so two beats or
        a restarted one never start a tick twice).

        Args:
            agent: The agent, as an object or by name.
            message: The text each run starts with.
            cron: A cron expression of five fields, in UTC (:mod:`agents_celery.schedule`).
            every: Seconds between ticks, 1 or more. Give ``cron`` or ``every``, not both.
            session_id: The session every run joins. A tick that finds the session's previous run still live is
                skipped.
            name: A name for the schedule.
            user_id: The user the runs are of.

        Returns:
            The stored schedule, with its id and next tick.

        Raises:
            UnknownAgentError: nobody serves an agent of that name.
            ValidationError: not exactly one of ``cron`` and ``every``, a cron expression that cannot be read or
                never matches, ``every`` under 1, or an empty ``message``.
            PayloadTooLargeError: ``message`` is over ``max_message_chars``.
        """
        manifest = self.agent_manifest(agent)
        now = int(time.time() * 1000)
        found = Schedule(
            uuid.uuid4().hex, manifest["name"], message, cron, every, session_id, name, user_id, created_at=now
        ).validate()
        if len(message) > self.settings.max_message_chars:
            raise PayloadTooLargeError(
                f"the message has {len(message)} characters; at most {self.settings.max_message_chars} are accepted"
            )
        found.next_at = found.due_after(now)
        self.schedule_store.save(found, found.next_at)
        return found

    def schedules(self) -> list[Schedule]:
        """Every schedule, oldest first.

        Returns:
            The stored schedules.
        """
        return self.schedule_store.all()

    def get_schedule(self, schedule_id: str) -> Schedule:
        """One schedule.

        Args:
            schedule_id: The schedule's id.

        Returns:
            The stored schedule.

        Raises:
            ScheduleNotFoundError: no schedule has that id.
        """
        found = self.schedule_store.get(schedule_id)
        if found is None:
            raise ScheduleNotFoundError(f"no schedule {schedule_id!r}")
        return found

    def pause_schedule(self, schedule_id: str, paused: bool = True) -> Schedule:
        """Pause (no ticks fire) or resume a schedule; a resumed one goes on from its next tick after now.

        Args:
            schedule_id: The schedule's id.
            paused: True pauses the schedule, False resumes it.

        Returns:
            The schedule as stored now.

        Raises:
            ScheduleNotFoundError: no schedule has that id.
        """
        found = self.get_schedule(schedule_id)
        found.paused = paused
        found.next_at = found.due_after(int(time.time() * 1000))
        self.schedule_store.save(found, found.next_at)
        return found

    def delete_schedule(self, schedule_id: str) -> None:
        """Delete a schedule; the runs it started are left as they are.

        Args:
            schedule_id: The schedule's id.

        Raises:
            ScheduleNotFoundError: no schedule has that id.
        """
        if not self.schedule_store.delete(schedule_id):
            raise ScheduleNotFoundError(f"no schedule {schedule_id!r}")

    def fire_schedules(self, now_ms: int | None = None) -> float | None:
        """Start the runs of the ticks due now (Celery beat calls this).

        A tick missed while no beat ran (or while the schedule was paused) is not made up, but the last one
        due is fired once when beat comes back. A tick whose run is refused (the session is busy, the agent
        unknown, the input invalid) is logged and skipped.

        Args:
            now_ms: The time to fire the ticks due at, in Unix ms (None: now).

        Returns:
            Seconds until the next tick is due (None: no schedule has one).
        """
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        for schedule_id, due in self.schedule_store.due(now):
            found = self.schedule_store.get(schedule_id)
            if found is None:
                self.schedule_store.delete(schedule_id)
                continue
            tick = found.latest_due(due, now)
            if not found.paused:
                self._fire(found, tick)
            self.schedule_store.advance(schedule_id, found.due_after(now))
        following = self.schedule_store.next_due()
        return None if following is None else max(0.0, (following - now) / 1000)

    def _fire(self, found: Schedule, tick: int) -> None:
        try:
            self.stream(
                found.agent_id,
                found.message,
                session_id=found.session_id,
                user_id=found.user_id,
                idempotency_key=f"schedule:{found.schedule_id}:{tick}",
                schedule=(found.schedule_id, tick),
            )
        except (SessionBusyError, UnknownAgentError, ValidationError) as exc:
            log.warning("schedule %s: tick %d not started: %s", found.schedule_id, tick, exc)
