"""ScriptedModel: an offline, deterministic model that plays back scripted turns, for tests and demos."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from .base import ModelChunk, TextDelta, ToolCallDelta, Usage

__all__ = ["ScriptedModel", "ScriptedToolCall", "ScriptedTurn", "as_turn", "split_tokens", "turn_index", "word_count"]

_TOKEN_RE = re.compile(r"\S+\s*|\s+")


@dataclass(frozen=True)
class ScriptedToolCall:
    """A tool call a :class:`ScriptedModel` makes.

    Args:
        name: Tool name.
        arguments: Arguments as a dict or a JSON string (an invalid string exercises argument errors).
        id: Call id; by default ``call_<turn>_<i>``.
    """

    name: str
    arguments: dict[str, Any] | str
    id: str | None = None

    def arguments_json(self) -> str:
        """The arguments as JSON text."""
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class ScriptedTurn:
    """One scripted assistant turn: text, then tool calls.

    Args:
        text: The text the turn streams ("": none).
        tool_calls: The tool calls the turn makes after its text.
    """

    text: str = ""
    tool_calls: Sequence[ScriptedToolCall] = ()


def as_turn(turn: ScriptedTurn | str) -> ScriptedTurn:
    """A turn given as a bare string is a text-only turn."""
    return ScriptedTurn(text=turn) if isinstance(turn, str) else turn


def turn_index(messages: Sequence[dict[str, Any]]) -> int:
    """Which scripted turn comes next: the number of assistant messages after the last user message.

    So a run that goes model -> tools -> model takes turn 0 then turn 1, and the next user message of the same
    session starts again at turn 0. A message that sent a failed structured output back to the model
    (:data:`agents_celery.output.RETRY_PREFIX`) is not the user's: the retried answer is the next turn.
    """
    from ..output import RETRY_PREFIX

    count = 0
    for message in reversed(messages):
        role = message.get("role")
        content = message.get("content")
        if role == "user" and not (isinstance(content, str) and content.startswith(RETRY_PREFIX)):
            break
        if role == "assistant":
            count += 1
    return count


def split_tokens(text: str) -> list[str]:
    """Split text into word-like tokens that keep their trailing whitespace; joined they give ``text`` back."""
    return _TOKEN_RE.findall(text)


def word_count(messages: Sequence[dict[str, Any]]) -> int:
    """Whitespace-separated words in the string contents of ``messages`` (a stand-in for prompt tokens)."""
    # One join and one split (in C) instead of a split per message: the count is the same.
    return len(" ".join(c for m in messages if isinstance(c := m.get("content"), str)).split())


class ScriptedModel:
    """An offline, deterministic model that plays back scripted turns.

    The turn played is the number of assistant messages after the last user message (see :func:`turn_index`);
    past the end of the script the last turn repeats. Text streams word by word, tool calls stream their
    arguments in two halves, then usage in words.

    Args:
        turns: The script; a string is a text-only turn.
        token_delay: Seconds slept before each text token (to look like a real model).
        name: Name the model reports.

    Raises:
        ConfigurationError: The script is empty.
    """

    def __init__(
        self, turns: Sequence[ScriptedTurn | str], *, token_delay: float = 0.0, name: str = "scripted"
    ) -> None:
        if not turns:
            raise ConfigurationError("ScriptedModel needs at least one turn")
        self.turns = [as_turn(turn) for turn in turns]
        self.token_delay = token_delay
        self._name = name

    @property
    def name(self) -> str:
        """The name given at construction (``"scripted"`` by default)."""
        return self._name

    def __repr__(self) -> str:
        return f"ScriptedModel({len(self.turns)} turns, name={self._name!r})"

    def describe(self) -> dict[str, Any]:
        """What a worker publishes about the model."""
        return {"provider": "scripted", "name": self._name, "turns": len(self.turns)}

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        response_format: dict[str, Any] | None = None,
    ) -> Iterator[ModelChunk]:
        """Stream the scripted turn that ``messages`` call for.

        Args:
            messages: Chat Completions messages (only roles and string contents are read).
            tools: Ignored.
            response_format: Ignored (script the JSON the turn answers).

        Yields:
            Text deltas, tool call deltas, then the usage.
        """
        index = turn_index(messages)
        turn = self.turns[min(index, len(self.turns) - 1)]
        for token in split_tokens(turn.text):
            if self.token_delay:
                time.sleep(self.token_delay)
            yield TextDelta(token)
        completion = len(turn.text.split())
        for i, call in enumerate(turn.tool_calls):
            arguments = call.arguments_json()
            half = len(arguments) // 2
            yield ToolCallDelta(index=i, id=call.id or f"call_{index}_{i}", name=call.name, arguments=arguments[:half])
            yield ToolCallDelta(index=i, id=None, name=None, arguments=arguments[half:])
            completion += len(arguments.split())
        prompt = word_count(messages)
        yield Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
