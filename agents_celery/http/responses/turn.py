"""What a ``POST /v1/responses`` is, decided once (no I/O): a new run, the next turn of a session, or the answers
to a paused run. See the table in docs/responses.md ("What a create is").

A client may send its whole history every time (pydantic-ai's and the Agents SDK's defaults), so one request can
hold outputs of calls that were answered long ago next to the answers to the calls pending now, and then a new
user message. :func:`classify` sorts that out against the run the request is about (its :class:`Anchor`): an
answer to a call already answered, with the same output, is history and is skipped; an answer to a pending call is
a decision; a history whose answers are all old and that ends with a user message is the next turn of the anchor's
session. The route (:mod:`.endpoint`) gathers the anchor and carries the :class:`Turn` out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ...errors import BadRequestError, StateError, UnsupportedError
from .input import Input
from .render import parse_approval_id, parse_client_call_id


@dataclass(frozen=True)
class Anchor:
    """The run a request is about (named by ``previous_response_id``, or by the call ids its items carry)."""

    run_id: str
    session_id: str
    #: The run waits for answers (paused with pending calls).
    paused: bool
    #: The model's ids of the calls waiting for an answer.
    pending: frozenset[str] = frozenset()
    #: The model's ids of the calls answered already: the client's output as recorded (None for an approval).
    answered: dict[str, str | None] = field(default_factory=dict)


@dataclass
class Turn:
    """What a create is: ``new`` (a run in a new session, or the conversation's), ``next`` (a new run in the
    anchor's session) or ``answer`` (the anchor goes on with these decisions)."""

    kind: Literal["new", "next", "answer"]
    outputs: list[dict[str, Any]] = field(default_factory=list)
    approvals: list[dict[str, Any]] = field(default_factory=list)


def classify(got: Input, anchor: Anchor | None) -> Turn:
    """The :class:`Turn` ``got`` is, about ``anchor``; BadRequestError / StateError (409) say why it is none."""
    if anchor is None:  # a new message after a history we do not hold (its run expired) is a new run, too
        if (got.outputs or got.approvals) and got.text is None:
            raise BadRequestError(
                "answers to a paused response need its previous_response_id (or function_call_output items "
                "with the call_id of its function_call items)"
            )
        return Turn("new")
    outputs = [o for o in got.outputs if _is_new(anchor, _model_id(anchor, o["call_id"]), o["output"])]
    outputs = [{**o, "call_id": _model_id(anchor, o["call_id"])} for o in outputs]
    approvals = [a for a in got.approvals if _is_new(anchor, _approval_id(anchor, a["approval_request_id"]), None)]
    approvals = [{**a, "approval_request_id": _approval_id(anchor, a["approval_request_id"])} for a in approvals]
    if got.text is not None:
        if outputs or approvals:
            raise UnsupportedError(
                "a new user message cannot come with answers to pending calls: send the answers first, then the "
                "message in the next request"
            )
        if anchor.paused:
            raise StateError(
                "the response is waiting for answers to its calls: answer them (or cancel it) before a new message"
            )
        return Turn("next")
    if not (outputs or approvals):
        raise StateError("every answer in the input was given already: nothing to continue")
    return Turn("answer", outputs, approvals)


def _is_new(anchor: Anchor, model_id: str | None, output: str | None) -> bool:
    """Whether an answer decides something: a pending call (or one we do not know: the continue says why it does
    not fit). A call answered already is history, if the output is the same; another run's call is history too."""
    if model_id is None:
        return False
    if model_id in anchor.pending or model_id not in anchor.answered:
        return True
    recorded = anchor.answered[model_id]
    if output is not None and recorded is not None and recorded != output:
        raise StateError(f"call {model_id!r} was answered already, with another output")
    return False


def _model_id(anchor: Anchor, call_id: str) -> str | None:
    """The model's id of a call of the anchor's run (None: the call is of another run, so history)."""
    parsed = parse_client_call_id(call_id)
    if parsed is None:
        return call_id
    return parsed[1] if parsed[0] == anchor.run_id else None


def _approval_id(anchor: Anchor, ident: str) -> str | None:
    """The model's id of the call an approval answers (None: a call of another run, so history)."""
    parsed = parse_approval_id(ident)
    if parsed is None:
        return ident
    return parsed[1] if parsed[0] == anchor.run_id else None


def anchor_runs(got: Input) -> list[str]:
    """The runs the items' call ids name, in order (the last one is the run a stateless history is about)."""
    runs = []
    for ident in got.call_ids:
        parsed = parse_client_call_id(ident) or parse_approval_id(ident)
        if parsed is not None:
            runs.append(parsed[0])
    return runs
