"""History policies: what of a long conversation goes into the prompt (``Agent(history=...)``).

A session's history grows without bound; the policy shortens only what is **sent to the model**. The run's
``messages`` and the session's history keep every turn (``GET /sessions/<id>``, ``Runtime.get_stream(...).get()``).

- :class:`LastTurns` sends the last ``n`` turns (a turn starts at a user message, so a tool call and its result
  are never split).
- :class:`Summarize` sends everything while the prompt is under ``max_prompt_tokens``; past it, a **summary
  step** (a model turn of its own, committed like any step) replaces the older part with a summary and the
  prompt keeps the last ``keep_last_turns`` turns verbatim. When those turns are all there is (one question
  followed by many tool rounds), the summary replaces the turn's older tool rounds instead: the prompt keeps the
  question, then the summary, then the last tool round.

A summary is stored as a *marker* message appended to the conversation (``role: system`` with a
``history_summary`` field): it travels with the session's history, so the next run of the session starts from
it, and the prompt builder (:func:`prompt_messages`) turns it into one system message in front of the turns it
kept. Its ``kept`` field counts the messages just before it that stay verbatim; everything before those is what it
replaced (an earlier summary included). A summary made inside a turn also has ``question``: how far before the
marker the turn's question is (it stays verbatim, in front of the summary).

Tokens are counted without a tokenizer download (tiktoken fetches its encodings from the internet): the server's
reported ``prompt_tokens`` of the last turn (recorded on its assistant message as ``usage``, the openai SDK's
``stream_options.include_usage``) plus an estimate of what came after it, **4 characters per token** (and 4
tokens per message). With no reported usage behind it (a new policy, or a summary since), the whole prompt is
estimated that way. No I/O here: the engine's summary step (:mod:`agents_celery.engine.summary`) does the call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError
from .output import RETRY_PREFIX

if TYPE_CHECKING:
    from .models import Model

#: Characters per token of the estimate (what reported usage does not cover).
CHARS_PER_TOKEN = 4
#: Tokens a message costs beyond its text (role, separators), as OpenAI's cookbook counts them.
TOKENS_PER_MESSAGE = 4
#: The key of a summary marker message.
MARKER = "history_summary"
#: The first line of a summary request's user message (the fake OpenAI server's tests recognise it by this).
REQUEST_HEADER = "Summarise this conversation (the earlier summary, if any, comes first):"
#: What the summary model is told by default.
DEFAULT_INSTRUCTIONS = (
    "You write the running summary of a conversation between a user and an assistant, so the assistant can go "
    "on without the full transcript. Keep every fact, decision, name, number and open question; drop "
    "pleasantries. Answer with the summary only, in at most a few short paragraphs."
)
#: What the model sees in front of a summary in its prompt.
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


@dataclass(frozen=True)
class LastTurns:
    """Send only the last ``n`` turns of the conversation (a turn starts at a user message).

    Args:
        n: How many turns; at least 1 (the turn the model answers now).
    """

    n: int

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ConfigurationError(f"LastTurns(n) needs n >= 1, got {self.n!r}")


@dataclass(frozen=True)
class Summarize:
    """Summarise the older part of the conversation when the prompt passes ``max_prompt_tokens``.

    Args:
        max_prompt_tokens: The budget of the prompt (instructions, tools and messages), counted as the module
            docstring says. A model turn whose prompt would pass it is preceded by a summary step.
        keep_last_turns: Turns sent verbatim after the summary (at least 1: the turn being answered).
        summary_model: The model that writes the summary (default: the agent's own).
        instructions: The summary model's system prompt.
    """

    max_prompt_tokens: int
    keep_last_turns: int = 4
    summary_model: Model | None = None
    instructions: str = DEFAULT_INSTRUCTIONS

    def __post_init__(self) -> None:
        if not isinstance(self.max_prompt_tokens, int) or self.max_prompt_tokens < 1:
            raise ConfigurationError(f"Summarize needs max_prompt_tokens >= 1, got {self.max_prompt_tokens!r}")
        if not isinstance(self.keep_last_turns, int) or self.keep_last_turns < 1:
            raise ConfigurationError(f"Summarize needs keep_last_turns >= 1, got {self.keep_last_turns!r}")


HistoryPolicy = LastTurns | Summarize


def is_summary_request(request: dict[str, Any]) -> bool:
    """Whether a Chat Completions request body is a summary step's (its user message starts with
    :data:`REQUEST_HEADER`): how a fake server tells them from the agent's turns."""
    messages = request.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    content = last.get("content")
    return last.get("role") == "user" and isinstance(content, str) and content.startswith(REQUEST_HEADER)


def is_marker(message: dict[str, Any]) -> bool:
    """Whether ``message`` is a summary marker."""
    return isinstance(message.get(MARKER), dict)


def clean(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as the model gets it: without the ``usage`` this module records on assistant messages."""
    return {k: v for k, v in message.items() if k != "usage"} if "usage" in message else message


def last_marker(messages: Sequence[dict[str, Any]]) -> int:
    """The position of the latest summary marker (-1: none)."""
    for i in range(len(messages) - 1, -1, -1):
        if is_marker(messages[i]):
            return i
    return -1


def view_start(messages: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """Where the prompt's verbatim part starts, and the marker in effect (-1: none, from the start)."""
    at = last_marker(messages)
    if at < 0:
        return 0, -1
    return max(0, at - int(messages[at][MARKER].get("kept", 0))), at


def prompt_messages(policy: HistoryPolicy | None, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages sent to the model after the instructions, as ``policy`` shortens ``messages``."""
    if isinstance(policy, LastTurns):
        plain = [m for m in messages if not is_marker(m)]
        return [clean(m) for m in plain[turn_start(plain, policy.n) :]]
    if isinstance(policy, Summarize):
        return summarized_view(messages)
    return [clean(m) for m in messages if not is_marker(m)]


def summarized_view(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The latest summary (as a system message), then the messages it kept and every one since; a summary made
    inside a turn comes after the turn's question."""
    start, at = view_start(messages)
    if at < 0:
        return [clean(m) for m in messages if not is_marker(m)]
    head = [{"role": "system", "content": SUMMARY_PREFIX + str(messages[at].get("content") or "")}]
    question = kept_question(messages, at)
    if question >= 0:
        head.insert(0, clean(messages[question]))
    return head + [clean(m) for m in messages[start:] if not is_marker(m)]


def kept_question(messages: Sequence[dict[str, Any]], at: int) -> int:
    """The position of the question a summary made inside a turn keeps verbatim (-1: none, or no marker)."""
    if at < 0:
        return -1
    back = messages[at][MARKER].get("question")
    return at - int(back) if isinstance(back, int) and 0 < back <= at else -1


def turn_start(messages: Sequence[dict[str, Any]], n: int) -> int:
    """The position of the user message that starts the ``n``-th last turn of ``messages`` (0 when it has
    fewer). A user message starts a turn when it comes first or after the model's answer (an assistant message
    without tool calls) and is not the engine's output retry; a message steering a live run (after a tool result
    or another user message) belongs to the turn it came into."""
    seen = 0
    for i in range(len(messages) - 1, -1, -1):
        if starts_turn(messages, i):
            seen += 1
            if seen == n:
                return i
    return 0


def starts_turn(messages: Sequence[dict[str, Any]], i: int) -> bool:
    """Whether ``messages[i]`` is a user message that starts a turn (see :func:`turn_start`)."""
    message = messages[i]
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str) and content.startswith(RETRY_PREFIX):
        return False
    if i == 0:
        return True
    before = messages[i - 1]
    return before.get("role") == "assistant" and not before.get("tool_calls")


# -- counting ------------------------------------------------------------------------------------------


def estimate(message: dict[str, Any]) -> int:
    """The estimated tokens of one message: its text and tool calls at 4 characters per token."""
    chars = _content_chars(message.get("content"))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        chars += len(str(function.get("name") or "")) + len(str(function.get("arguments") or ""))
    return TOKENS_PER_MESSAGE + -(-chars // CHARS_PER_TOKEN)


def _content_chars(content: Any) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):  # content parts: the text of text parts, a flat 85 tokens for anything else
        return sum(
            len(str(p.get("text") or "")) if isinstance(p, dict) and p.get("type") == "text" else 85 * CHARS_PER_TOKEN
            for p in content
        )
    return len(json.dumps(content))


def fixed_tokens(instructions: str, tools: Sequence[dict[str, Any]]) -> int:
    """The estimated tokens of what every prompt carries: the instructions (a system message) and the tools."""
    chars = len(instructions) + (len(json.dumps(list(tools))) if tools else 0)
    return (TOKENS_PER_MESSAGE if instructions else 0) + -(-chars // CHARS_PER_TOKEN)


def prompt_tokens(messages: Sequence[dict[str, Any]], fixed: int) -> int:
    """The prompt's tokens under :class:`Summarize` (``fixed``: :func:`fixed_tokens`): the reported usage of the
    last turn since the marker in effect, plus the estimate of what came after; else all estimated."""
    _, at = view_start(messages)
    for i in range(len(messages) - 1, at, -1):  # turns since the marker in effect
        usage = messages[i].get("usage")
        if messages[i].get("role") == "assistant" and isinstance(usage, dict) and usage.get("prompt_tokens"):
            reported = int(usage["prompt_tokens"]) + int(usage.get("completion_tokens") or 0)
            return reported + sum(estimate(m) for m in messages[i + 1 :] if not is_marker(m))
    return fixed + sum(estimate(m) for m in summarized_view(messages))


def with_usage(message: dict[str, Any], prompt: int, completion: int) -> dict[str, Any]:
    """An assistant message with the usage its turn reported (only :class:`Summarize` records it)."""
    if prompt <= 0:
        return message
    return {**message, "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


# -- the summary step's plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SummaryPlan:
    """What a summary step replaces: ``messages[start:cut]`` (and the summary in effect, at ``previous``; -1:
    none); ``tokens``: the prompt's tokens as they stand (:func:`prompt_tokens`); ``question``: the question of
    the turn a summary made inside it keeps verbatim (-1: a summary of whole turns)."""

    start: int
    cut: int
    previous: int
    tokens: int
    question: int = -1

    def request(self, policy: Summarize, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The summary model's messages: its instructions, then the earlier summary and the replaced turns."""
        lines = [REQUEST_HEADER]
        if self.previous >= 0:
            lines.append(f"[earlier summary] {messages[self.previous].get('content') or ''}")
            asked = kept_question(messages, self.previous)  # the earlier summary's question: not in it
            if 0 <= asked < self.start:
                lines.append(_transcript_line(messages[asked]))
        for m in messages[self.start : self.cut]:
            if not is_marker(m):
                lines.append(_transcript_line(m))
        return [{"role": "system", "content": policy.instructions}, {"role": "user", "content": "\n".join(lines)}]

    def marker(self, text: str, messages: Sequence[dict[str, Any]], summary_id: str, model: str) -> dict[str, Any]:
        """The marker message the step appends at the end of ``messages``."""
        info = {
            "id": summary_id,
            "kept": len(messages) - self.cut,
            "replaced": self.replaced(messages),
            "from_index": self.start,
            "to_index": self.cut,
            "previous": messages[self.previous][MARKER].get("id") if self.previous >= 0 else None,
            "model": model,
        }
        if self.question >= 0:
            info["question"] = len(messages) - self.question
        return {"role": "system", "content": text, MARKER: info}

    def replaced(self, messages: Sequence[dict[str, Any]]) -> int:
        """How many conversation messages the new summary stands for (the earlier summary's included)."""
        before = int(messages[self.previous][MARKER].get("replaced", 0)) if self.previous >= 0 else 0
        kept = 1 if self.start <= self.question < self.cut else 0  # the question stays: not replaced
        return before + sum(1 for m in messages[self.start : self.cut] if not is_marker(m)) - kept


def plan_summary(policy: HistoryPolicy | None, messages: Sequence[dict[str, Any]], fixed: int) -> SummaryPlan | None:
    """The summary step the next model turn needs (None: none; the prompt is within the budget, the policy is
    not :class:`Summarize`, or nothing is older than the turns it keeps). No I/O."""
    if not isinstance(policy, Summarize):
        return None
    tokens = prompt_tokens(messages, fixed)
    if tokens <= policy.max_prompt_tokens:
        return None
    start, at = view_start(messages)
    cut = start + turn_start(messages[start:], policy.keep_last_turns)
    if any(not is_marker(m) for m in messages[start:cut]):
        return SummaryPlan(start, cut, at, tokens)
    return _plan_inside_turn(messages, start, at, tokens)


def _plan_inside_turn(messages: Sequence[dict[str, Any]], start: int, at: int, tokens: int) -> SummaryPlan | None:
    """The kept turns are all there is: summarise what comes before the last turn's last tool round (its question
    kept verbatim). None when nothing comes before that round but the question (one round is all there is)."""
    question = kept_question(messages, at)
    if question < 0 or any(starts_turn(messages, i) for i in range(start, len(messages))):
        question = start + turn_start(messages[start:], 1)
        if messages[question].get("role") != "user":
            return None
    rounds = [i for i in range(max(start, question + 1), len(messages)) if messages[i].get("tool_calls")]
    if not rounds:
        return None
    cut = rounds[-1]
    if not any(not is_marker(m) for i, m in enumerate(messages[start:cut], start) if i != question):
        return None
    return SummaryPlan(start, cut, at, tokens, question)


def _transcript_line(message: dict[str, Any]) -> str:
    role = str(message.get("role") or "?")
    content = message.get("content")
    if isinstance(content, list):  # content parts: their text, and a placeholder for each image or file
        text = " ".join(
            str(p.get("text") or "") if p.get("type") == "text" else f"[{p.get('type') or 'part'}]"
            for p in content
            if isinstance(p, dict)
        )
    else:
        text = content if isinstance(content, str) else json.dumps(content) if content else ""
    calls = [
        f"{(c.get('function') or {}).get('name')}({(c.get('function') or {}).get('arguments')})"
        for c in message.get("tool_calls") or []
    ]
    if calls:
        text = (text + " " if text else "") + "[calls " + ", ".join(calls) + "]"
    return f"{role}: {text}"
