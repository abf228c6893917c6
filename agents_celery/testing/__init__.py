"""Test helpers shipped for users: run agents without a worker, a local OpenAI-compatible server, a private Redis.

- :class:`InlineRunner` runs an agent's steps to the end in the calling process (real Redis, real engine).
- :class:`FakeOpenAIServer` is a local HTTP server that answers like OpenAI's Chat Completions, so the real
  ``openai`` SDK (and a real worker) can talk to it; :class:`ScriptResponder` and :class:`FailingResponder` say
  what it answers.
- :class:`EmbeddedRedis` starts a throw-away ``redis-server`` on a unix socket.
"""

from __future__ import annotations

from .embedded import EmbeddedRedis
from .openai_server import FailingResponder, FakeOpenAIServer, FakeReply, Responder, ScriptResponder
from .runner import InlineRunner

__all__ = [
    "EmbeddedRedis",
    "FailingResponder",
    "FakeOpenAIServer",
    "FakeReply",
    "InlineRunner",
    "Responder",
    "ScriptResponder",
]
