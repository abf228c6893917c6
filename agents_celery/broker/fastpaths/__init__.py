"""Fast paths: every use of a private attribute of Celery, kombu or redis-py, in one package, with one switch.

Each one saves a round trip or a few system calls on the step path; each has a plain equivalent on public APIs
only, which is what runs when it is off. ``AGENTS_CELERY_FAST_PATHS=0`` turns them all off; so does a
Celery, kombu or redis-py version outside the ranges they were written against and tested on
(:data:`TESTED`). The worker logs at start which are on and why any is off (:meth:`FastPaths.describe`).

=====================  ===============================================================  ==========================
fast path              what it does                                                    plain path when off
=====================  ===============================================================  ==========================
``send_ahead``         writes a script call to its connection now and reads the reply   the call is made at once
                       later (a tool's ledger result; a claim sent as its message       (:func:`~agents_celery.st
                       arrives). redis-py: ``ConnectionPool.get_connection``,           orage.pending.call_now`)
                       ``Connection.send_command`` / ``read_response``.
``idle_poll``          looks at a kept connection with one ``poll`` before a command    ``Connection.can_read(0)``,
                       (redis-py: ``Connection._sock``).                                the pool's own check
``direct_publish``     sends a step's message with one LPUSH of the JSON kombu's Redis  ``app.send_task``
                       transport would store (kombu's message layout, its queue key).
``commit_pushes_next`` the commit script pushes the next step's message itself when     the engine enqueues after
                       the broker is the state Redis (the same layout, inside Lua).     the commit
``commit_acks``        the commit script acks the step's own message (kombu's           Celery acks after the task
                       ``unacked`` / ``unacked_index`` keys); :class:`StepRequest`      returns
                       settles Celery's bookkeeping without a round trip (Celery's
                       ``Request._on_ack`` / ``_on_reject`` promises, kombu's
                       ``QoS._remove_from_indices``, ``Message._state``).
``claim_on_receipt``   the consumer sends a step's claim as it receives the message     the task claims when it
                       (threads and solo pools; needs ``commit_acks``' request class).  starts
=====================  ===============================================================  ==========================

Public APIs are used wherever they cost nothing measurable: ``Request.message`` and ``connection_errors``,
kombu's ``QoS.unacked_key`` / ``unacked_index_key`` names, ``QoS.restore_by_tag``.

One module per library whose internals it touches, each private use commented with the versions it was checked
on: :mod:`._redispy` (``send_ahead``, ``idle_poll``), :mod:`._kombu` (the message layout, kombu's ack in two
halves), :mod:`._celery` (the step task's request class). The names are leading-underscore so that none shadows
the library it wraps. Nothing here is module-level mutable state: the messages a consumer received and the claim
sender they share with the step's thread are a :class:`StepMessages` owned by the app's
:class:`~agents_celery.broker.extension.AgentsCelery` (``ext.step_messages``); :class:`FastPaths` is the
extension's too (``ext.fast``). :data:`TESTED` is configuration, read when a process decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

from packaging.version import Version

from ...storage.pending import SendAhead, call_now
from ._celery import StepMessages, StepRequest
from ._kombu import DirectPublisher
from ._redispy import Sent, reconnect_if_closed

__all__ = [
    "NAMES",
    "TESTED",
    "DirectPublisher",
    "FastPaths",
    "Sent",
    "StepMessages",
    "StepRequest",
    "reconnect_if_closed",
]

#: The versions the fast paths were written against and tested on: (oldest, newest minor), inclusive.
TESTED: dict[str, tuple[str, str]] = {"celery": ("5.5", "5.7"), "kombu": ("5.5", "5.7"), "redis": ("5.0", "8.2")}

NAMES = (
    "send_ahead",
    "idle_poll",
    "direct_publish",
    "commit_pushes_next",
    "commit_acks",
    "claim_on_receipt",
)


def _untested() -> list[str]:
    """The packages whose installed version is outside :data:`TESTED` (compared by major.minor)."""
    out = []
    for package, (oldest, newest) in TESTED.items():
        try:
            installed = Version(version(package))
        except Exception:  # not installed as a distribution: nothing to compare
            continue
        minor = Version(f"{installed.major}.{installed.minor}")
        if not Version(oldest) <= minor <= Version(newest):
            out.append(f"{package} {installed} (tested {oldest}-{newest})")
    return out


@dataclass
class FastPaths:
    """Which fast paths this process may use, and why any is off.

    ``enabled`` is the switch (``AGENTS_CELERY_FAST_PATHS``) combined with the version check; each path then
    has its own conditions, which the broker wiring records with :meth:`off` as it finds them.
    """

    enabled: bool
    why_not: str = ""
    reasons: dict[str, str] = field(default_factory=dict)

    @classmethod
    def decide(cls, setting: bool) -> FastPaths:
        if not setting:
            return cls(False, "AGENTS_CELERY_FAST_PATHS=0")
        untested = _untested()
        if untested:
            return cls(False, "untested versions: " + ", ".join(untested))
        return cls(True)

    def on(self, name: str) -> bool:
        """Whether ``name`` is on (enabled, and not turned off for a reason of its own)."""
        return self.enabled and name not in self.reasons

    def off(self, name: str, why: str) -> None:
        """Turn ``name`` off for this process, saying why (the first reason stays)."""
        self.reasons.setdefault(name, why)

    def describe(self) -> str:
        """One line for the worker's log: each fast path, on or off (and why)."""
        if not self.enabled:
            return f"all off ({self.why_not})"
        return ", ".join(f"{n} off ({self.reasons[n]})" if n in self.reasons else f"{n} on" for n in NAMES)

    @property
    def send_ahead(self) -> SendAhead:
        return Sent.make if self.on("send_ahead") else call_now

    @property
    def idle_check(self) -> Any:
        from ...storage.connections import reconnect_if_closed as plain

        return reconnect_if_closed if self.on("idle_poll") else plain
