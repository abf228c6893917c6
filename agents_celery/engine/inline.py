"""Steps a worker thread runs right after the step it was given, with no broker hop between them.

A workflow's step that starts an agent step's child run ends waiting, and the child's end wakes the workflow. Both
hops used to go through the broker (the child's first step) or the stack (the wake ran the workflow's step inside
the child's commit). Now the engine runs them on the same thread, one after another, from a queue the outermost
:meth:`Engine.execute <agents_celery.engine.engine.Engine.execute>` drains once its own step is done (a trampoline):
a long workflow, or a loop of agent steps, does not grow the stack.

Durability does not rest on the thread. The workflow's step is committed (the child in its state, the child's run
created and in the sweeper's live index) before its child's first step is claimed here. That step has no broker
message: on the way it usually goes (a commit) none is needed, and one sent anyway would cost a publish, a delivery
and a claim that finds the step held or done. When the attempt here ends without a commit (given back, or an error
out of it) its step is sent then, as a task's retry would be. A worker killed meanwhile leaves a lease that expires
(or no claim at all), and the sweeper sends the step again, as after any crash of a step whose message was acked.

One thread runs at most :data:`INLINE_STEPS` steps this way per delivery, and starts none once half a lease's time
has passed since the first; the rest go through the broker. So a long workflow cannot hold a worker thread forever,
and a message the worker's consumer claimed as it arrived (its lease unrenewed until a thread takes its step) does
not wait behind a chain of them. Only one child of a step runs here (the first it started):
the other branches of a ``Parallel`` are sent at once, for any worker to take.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

#: What an attempt run here may end with and need no message: done, or another attempt's (it commits, or its lease
#: expires and the sweeper sends the step).
SETTLED = frozenset({"committed", "fenced", "stale", "busy", "ended", "notfound"})

#: Steps one delivery runs on its thread after its own, at most: a workflow of N sequential agent steps takes
#: 2N (each child's first step, then the workflow's step its end wakes).
INLINE_STEPS = 16


@dataclass(frozen=True)
class Due:
    """A step to run on this thread once the one running is done: a woken workflow's step, or (``held``) the first
    step of a child run its workflow started, which has no message (sent only if its attempt here does not
    commit). The workflow's commit does not ask Redis whether that child settled already (it has not, unless an
    earlier attempt of the step started it): its attempt here tells, and one that does not commit asks."""

    run_id: str
    step: int
    agent_id: str
    held: bool = False
    #: The step of the workflow (run, step, agent) that waits for this held child: woken from here when the child
    #: settled before its step ran here (an earlier attempt's child, run meanwhile), since its own end did not.
    parent: tuple[str, int, str] | None = None


class Here(threading.local):
    """This thread's trampoline (one per thread, or per greenlet on a gevent worker)."""

    def __init__(self) -> None:
        #: Inside :meth:`Engine.execute`: a step asking to run another queues it in :attr:`due`.
        self.running = False
        #: The steps to run once the current one is done, in order.
        self.due: deque[Due] = deque()
        #: Steps run from :attr:`due` since the delivery began.
        self.ran = 0
        #: The child run whose first step the current attempt holds back, unsent (the first it started).
        self.held: Due | None = None
