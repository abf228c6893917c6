"""OpenAI Agents SDK agents, durable on Celery (extra ``[openai-agents]``).

An agents module may define the SDK's own ``agents.Agent`` objects at module level, as they are: ``agents-celery
worker --agents module`` serves each under its name beside our own agents (``GET /agents``, every route, dialect
and client), running each step of its runs as one segment of the SDK's own runner with its model calls and function
tools journaled (:mod:`.segment`). :class:`CeleryRunner` is the caller's drop-in for ``agents.Runner``: the run
happens on the workers. See docs/openai-agents.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

try:
    from agents import Agent as _SdkAgent
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "agents_celery.contrib.openai_agents needs the OpenAI Agents SDK: pip install 'agents-celery[openai-agents]'"
    ) from exc

from ...agent import GUESTS, Agent
from .guest import SdkGuest, served_name
from .segment import idempotency_key, idempotent

if TYPE_CHECKING:
    from .runner import CeleryRunner

__all__ = ["CeleryRunner", "SdkGuest", "idempotency_key", "idempotent", "served", "served_name"]

#: id of an SDK agent -> (that agent, the SdkGuest serving it); agents modules live as long as the process.
_SERVED: dict[int, tuple[Any, SdkGuest]] = {}


def served(value: object) -> SdkGuest | None:
    """The agent of ours that serves ``value``, an Agents SDK agent (None for anything else). The same SDK agent
    always gets the same one."""
    if not isinstance(value, _SdkAgent):
        return None
    known = _SERVED.get(id(value))
    if known is None or known[0] is not value:
        known = _SERVED[id(value)] = (value, SdkGuest(value))
    return known[1]


def _adapt(value: object) -> Agent | None:
    return served(value)


if _adapt not in GUESTS:
    GUESTS.append(_adapt)


def __getattr__(name: str) -> Any:
    if name == "CeleryRunner":  # the caller's side: loads the Runtime (and Celery) only when asked for
        from .runner import CeleryRunner

        return CeleryRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
