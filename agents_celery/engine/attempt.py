"""One attempt at one step of one run, as an object (rq's ``Execution``), and what the broker does around it.

An :class:`Attempt` is made by the claim and passed whole through the step: its lease token (every write of
the attempt carries it), its number (the claim's count), the claim (the checkpoint, the effect ledger entries,
the inbox, a stop already requested), the hold on its lease (heartbeat, stop and lost signals) and the step's
context once the step started. The engine reads ``claim -> step -> commit`` on it; what the broker adds
around the attempt comes in one :class:`Delivery` (its claim sent as the message arrived, the next step's
message pushed by the commit, its own message acked by it), whose fast-path subclass lives in the broker layer
(:class:`agents_celery.broker.extension.FastDelivery`): the engine never imports Celery or kombu.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from ..events import NewEvent
from ..runs import RunState
from ..storage.leases import Holding
from ..storage.pending import Pending
from ..storage.store import Ack, Claim
from .steps import StepContext, step_started

#: What became of an attempt (``failed`` until it knows better).
Outcome = Literal["committed", "fenced", "given back", "failed"]

#: Makes a claim the ordinary way: a fresh lease token and the claim it got.
FreshClaim = Callable[[], "tuple[str, Claim]"]


def first_started(step: int) -> tuple[NewEvent, NewEvent]:
    """The STEP_STARTED of a first attempt, as a model turn and as a tool step: the claim writes the one that fits."""
    return step_started("model", step, 1), step_started("tools", step, 1)


@dataclass(frozen=True)
class Carried:
    """What a commit carries for the broker: the next step's message to push (the step queue's key and the
    message; None: the engine enqueues after the commit), the delivered message to ack (None: the broker acks
    it the ordinary way), and the delivered task's id (the parent of the next step's)."""

    task: tuple[str, str] | None = None
    ack: Ack | None = None
    task_id: str = ""


class Delivery:
    """What the broker does around one attempt. This base is the plain path: the engine claims, commits and
    enqueues by itself; the broker's fast paths override it. ``task_id``: the delivered task's id, kept by the
    commit as the parent of the next step's.
    """

    def __init__(self, task_id: str = "") -> None:
        self.task_id = task_id

    def claim(self, run_id: str, step: int, fresh: FreshClaim) -> tuple[str, Claim]:
        """The attempt's lease token and claim (``fresh()`` makes them the ordinary way)."""
        return fresh()

    @contextmanager
    def committing(self, run_id: str, next_step: int, agent_id: str, push_next: bool) -> Iterator[Carried]:
        """Around the commit of the attempt as ``next_step``: what the commit carries for the broker
        (``push_next``: the run goes on at once, so the commit may push the next step's message)."""
        yield Carried(task_id=self.task_id)


PLAIN = Delivery()


@dataclass
class Attempt:
    """One attempt at ``step`` of ``run_id`` (see the module docs)."""

    run_id: str
    step: int
    #: The lease token: every checkpoint write and event append of the attempt carries it.
    token: str
    claim: Claim
    delivery: Delivery = PLAIN
    #: When the claim that took the lease was sent (``time.monotonic``): its renewals are due from then.
    claimed: float = field(default_factory=time.monotonic)
    #: The hold on the lease while the step works (heartbeat, stop and lost signals); None before and after.
    lease: Holding | None = None
    #: The step's context, once the step started.
    ctx: StepContext | None = None
    #: Ledger results sent during the step; their replies are read before the commit.
    sent: list[Pending] = field(default_factory=list)
    #: When the attempt is given back: the tool calls it never invoked (their ledger entries are forgotten).
    not_run: list[str] = field(default_factory=list)
    #: What became of it: ``committed``, ``fenced``, ``given back``, ``failed`` (until it knows).
    outcome: Outcome = "failed"
    #: It was given back for a connection error (a blip, not counted against the step's attempts).
    blip: bool = False

    @property
    def number(self) -> int:
        """The attempt's number (1 for the first), as the claim counted it."""
        return self.claim.attempt

    @property
    def state(self) -> RunState:
        """The checkpoint the claim loaded (an attempt whose claim is OK has one)."""
        assert self.claim.state is not None
        return self.claim.state
