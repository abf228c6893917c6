"""Models: anything that streams one assistant turn from a list of Chat Completions messages.

- :mod:`.base`: the contract (:class:`Model`, the chunks it streams, :class:`TurnAccumulator`, :data:`STOP_READING`).
- :mod:`.openai`: :class:`OpenAIChat` talks to OpenAI or any OpenAI-compatible server.
- :mod:`.scripted`: :class:`ScriptedModel` replays scripted turns offline, for tests and demos.

The contract lives in a module of its own, not here: the two models import it, and this package re-exports them,
so a contract written here would make an import cycle. Importing this package does not import ``openai``.
"""

from __future__ import annotations

from .base import STOP_READING, Model, ModelChunk, TextDelta, ToolCallDelta, TurnAccumulator, Usage, reading_until
from .openai import OpenAIChat
from .scripted import ScriptedModel, ScriptedToolCall, ScriptedTurn

__all__ = [
    "STOP_READING",
    "Model",
    "ModelChunk",
    "OpenAIChat",
    "ScriptedModel",
    "ScriptedToolCall",
    "ScriptedTurn",
    "TextDelta",
    "ToolCallDelta",
    "TurnAccumulator",
    "Usage",
    "reading_until",
]
