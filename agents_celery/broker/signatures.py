"""Durable runs inside a user's Celery canvas: :func:`run_signature` makes a signature for ``chain``, ``group`` and
``chord`` that starts a run of an agent or a workflow, and passes the run's output on when the run ends.

The signature is a task of ours, ``agents_celery.start_run``: it starts the run (its message the previous task's
result, unless one is given; its idempotency key the task's id, so a redelivered task finds the run it started) and
returns at once. Before returning it takes what Celery would do after it (the rest of the chain, its links and
errbacks, the chord it counts for) off its own request and keeps it in the run's state (``RunState.canvas``). No
worker waits for the run. When the run ends, whoever follows its end through (:class:`~agents_celery.engine.
lifecycle.Lifecycle`, via :meth:`~.publisher.StepPublisher.notify`, :func:`~.publisher.send_end`) sends
``agents_celery.run_ended`` with the run's output and that canvas as its own options: it returns the output (the
chain goes on with it, the chord counts it) or, for a run that failed or was cancelled, raises
:class:`RunDidNotComplete` (the errbacks run, the chord fails). Sent at least once (a crash between the run's end
and the send leaves it to the sweeper), with a task id of the run's, so a duplicate is visible as one.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from ..errors import AgentsCeleryError
from ..settings import Settings, load_settings
from .publisher import ENDED_TASK

if TYPE_CHECKING:
    from celery import Celery
    from celery.canvas import Signature

log = logging.getLogger(__name__)

START_TASK = "agents_celery.start_run"
#: What of a task's request the run keeps to carry on with after its end.
CANVAS_FIELDS = ("chain", "callbacks", "errbacks", "chord", "group", "group_index", "root_id", "id")


class RunDidNotComplete(AgentsCeleryError):
    """The run a canvas waited for failed or was cancelled: the rest of the canvas does not get an output."""

    code = "run_did_not_complete"


def run_signature(agent_or_workflow: Any, message: str | None = None, **options: Any) -> Signature:
    """A Celery signature that starts a durable run of ``agent_or_workflow`` (an Agent, a Workflow, or its name) and
    passes its output on when it ends, for a ``chain``, ``group`` or ``chord`` of your own.

    Args:
        agent_or_workflow: What runs.
        message: The run's message; None: the previous task's result (text as it is, anything else as JSON).
        options: ``session_id``, ``user_id`` and the other keywords of ``Runtime.stream`` (JSON values); ``queue``
            sends the start task elsewhere than ``AGENTS_CELERY_QUEUE``.
    """
    from celery import signature

    name = agent_or_workflow if isinstance(agent_or_workflow, str) else agent_or_workflow.name
    queue = options.pop("queue", None) or load_settings().queue
    return signature(START_TASK, kwargs={"agent": name, "message": message, "options": options}, queue=queue)


def message_of(previous: Any, message: str | None) -> str:
    """The run's message: the one given, else the previous task's result as text."""
    if message is not None:
        return message
    return previous if isinstance(previous, str) else json.dumps(previous)


def register(app: Celery, settings: Settings) -> None:
    """The start and end tasks of ``app`` (their own options: JSON, acked late, results kept for the canvas)."""
    options: dict[str, Any] = {"shared": False, "bind": True, "serializer": "json", "acks_late": True}
    runtimes: list[Any] = []

    @app.task(name=START_TASK, queue=settings.queue, **options)  # type: ignore[untyped-decorator]
    def start_run(
        self: Any,
        previous: Any = None,
        *,
        agent: str,
        message: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> str:
        """Start the run, and leave the rest of the canvas to the run's end."""
        request = self.request
        canvas = {name: getattr(request, name, None) for name in CANVAS_FIELDS}
        if not runtimes:  # the Runtime's layer, from inside the function (as beat does)
            from ..runtime import Runtime

            runtimes.append(Runtime(settings=settings, celery_app=app))
        stream = runtimes[0].stream(
            agent,
            message_of(previous, message),
            idempotency_key=f"celery:{request.id}",
            canvas=canvas,
            **(options or {}),
        )
        # What Celery does after a task, the run's end does: none of it now.
        request.chain, request.callbacks, request.errbacks, request.chord = None, None, None, None
        return str(stream.id)

    @app.task(name=ENDED_TASK, queue=settings.queue, **options)  # type: ignore[untyped-decorator]
    def run_ended(self: Any, output: Any, run_id: str, status: str, error: str | None = None) -> Any:
        """The run's output, for the canvas that waited for it."""
        if status != "completed":
            raise RunDidNotComplete(f"run {run_id!r} ended {status}" + (f": {error}" if error else ""))
        return output
