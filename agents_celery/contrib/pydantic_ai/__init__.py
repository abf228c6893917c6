"""pydantic-ai agents, durable on Celery: ``CeleryDurability`` (extra ``[pydantic-ai]``).

Add the capability to a named pydantic-ai agent in an agents module; ``agents-celery worker --agents module``
serves it beside our own agents (``GET /agents``, every route, dialect and client). See docs/pydantic-ai.md.
"""

from __future__ import annotations

from typing import Any

try:
    from pydantic_ai import Agent as _PydanticAgent
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "agents_celery.contrib.pydantic_ai needs pydantic-ai: pip install 'agents-celery[pydantic-ai]'"
    ) from exc

from ...agent import GUESTS, Agent
from .capability import TOOL_CONFIG_KEY, CeleryDurability
from .guest import GuestAgent

__all__ = ["TOOL_CONFIG_KEY", "CeleryDurability", "GuestAgent", "served"]

#: id of a pydantic-ai agent -> (that agent, the GuestAgent serving it); agents modules live as long as the process.
_SERVED: dict[int, tuple[Any, GuestAgent]] = {}


def served(value: object) -> GuestAgent | None:
    """The agent of ours that serves ``value``, a pydantic-ai agent with ``CeleryDurability`` (None for anything
    else). The same pydantic-ai agent always gets the same one."""
    if not isinstance(value, _PydanticAgent) or CeleryDurability.from_agent(value) is None:
        return None
    known = _SERVED.get(id(value))
    if known is None or known[0] is not value:
        known = _SERVED[id(value)] = (value, GuestAgent(value))
    return known[1]


def _adapt(value: object) -> Agent | None:
    return served(value)


if _adapt not in GUESTS:
    GUESTS.append(_adapt)
