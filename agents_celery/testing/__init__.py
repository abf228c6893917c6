"""Test helpers shipped for users: a local OpenAI-compatible server and a private Redis server."""

from __future__ import annotations

from .openai_server import FailingResponder, FakeOpenAIServer, FakeReply, Responder, ScriptResponder

__all__ = ["FailingResponder", "FakeOpenAIServer", "FakeReply", "Responder", "ScriptResponder"]
