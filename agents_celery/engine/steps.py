"""What one step does: a model turn, or the tool calls of the last turn.

Plain Python on top of a :class:`StepContext`; the Celery task (:mod:`agents_celery.engine`) takes the
lease, builds the context, and commits the :class:`StepResult` these functions return. Events that must
appear live (text and tool-call deltas) go through ``ctx.writer``; events that belong with the checkpoint
(tool results, step end, run end) are returned and committed atomically with the new state.

The parts live in modules of their own, gathered here (the engine, guests and tests import them from here):
:mod:`.stepcontext` (the context, the result, the step's own events), :mod:`.endings` (completed, failed,
cancelled, paused), :mod:`.modelturn` (the model turn), :mod:`.toolstep` (the tool step).
"""

from __future__ import annotations

from .endings import cancelled, completed, failed, goes_on, paused, user_message_events
from .modelturn import after_turn, final_answer, list_toolsets, model_turn, new_call, with_parts
from .stepcontext import (
    Cancelled,
    StepContext,
    StepResult,
    step_event,
    step_finished,
    step_name,
    step_started,
    walked_away,
    with_step_finished,
)
from .toolstep import after_tools, answered, from_ledger, tool_step

__all__ = [
    # the context and the result
    "Cancelled",
    "StepContext",
    "StepResult",
    # the step's own events
    "step_event",
    "step_finished",
    "step_name",
    "step_started",
    "with_step_finished",
    "walked_away",
    # endings
    "cancelled",
    "completed",
    "failed",
    "goes_on",
    "paused",
    "user_message_events",
    # the model turn
    "after_turn",
    "final_answer",
    "list_toolsets",
    "model_turn",
    "new_call",
    "with_parts",
    # the tool step
    "after_tools",
    "answered",
    "from_ledger",
    "tool_step",
]
