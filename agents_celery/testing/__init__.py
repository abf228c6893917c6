"""Test helpers shipped for users: run agents without a worker, a local OpenAI-compatible server, a private Redis.

- :class:`InlineRunner` runs an agent's steps to the end in the calling process (real Redis, real engine).
- :class:`FakeOpenAIServer` is a local HTTP server that answers like OpenAI's Chat Completions, so the real
  ``openai`` SDK (and a real worker) can talk to it; :class:`ScriptResponder`, :class:`FailingResponder` and
  :class:`SummaryResponder` say what it answers.
- :class:`EmbeddedRedis` starts a throw-away ``redis-server`` on a unix socket.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .embedded import EmbeddedRedis
from .runner import InlineRunner

if TYPE_CHECKING:
    from .openai_server import (
        FailingResponder,
        FakeOpenAIServer,
        FakeReply,
        Responder,
        SchemaResponder,
        ScriptResponder,
        SummaryResponder,
    )

#: Imported on first use, so ``python -m agents_celery.testing.openai_server`` runs the module once (as
#: ``__main__``) rather than after the package imported it (runpy's RuntimeWarning).
_SERVER_NAMES = {
    "FailingResponder",
    "FakeOpenAIServer",
    "FakeReply",
    "Responder",
    "SchemaResponder",
    "ScriptResponder",
    "SummaryResponder",
}


def __getattr__(name: str) -> Any:
    if name in _SERVER_NAMES:
        from . import openai_server

        return getattr(openai_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EmbeddedRedis",
    "FailingResponder",
    "FakeOpenAIServer",
    "FakeReply",
    "InlineRunner",
    "Responder",
    "SchemaResponder",
    "ScriptResponder",
    "SummaryResponder",
]
