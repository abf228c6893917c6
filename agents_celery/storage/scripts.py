"""The Lua scripts: every state change of a run happens inside Redis, atomically, in one of ``lua/*.lua``.

Each file documents its KEYS and ARGV at the top and names them as locals before its first command (no
``KEYS[i]`` or ``ARGV[i]`` below that, except a variadic tail read by a named start index). A line
``-- @include _name.lua`` pulls in a helper (``_append``, ``_guard``, ``_expire``: local functions taking their
keys as arguments); :func:`source` expands them once and caches the text. ``make lint`` runs luacheck over that
expanded text (``scripts/lint-lua``, which maps each finding back to the file and line it comes from). Key layout
is in :mod:`agents_celery.storage.keys`. Scripts signal refusals with an error reply whose first word is a code
(``FENCED``, ``NOTFOUND``, ``ENDED``, ``EXISTS``, ``CONFLICT``, ``BUSY``, ``INBOX``); :func:`refusal` turns it into the
matching exception. Each script touches the keys of one run (or one session) only: one hash tag, one slot.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib.resources import files
from typing import Any

import redis

from ..errors import AgentsCeleryError, FencedError, RunBusyError, RunFinishedError, RunNotFoundError, StateError

_INCLUDE = "-- @include "


def expanded(name: str) -> list[tuple[str, str, int]]:
    """The lines of ``lua/<name>.lua`` with its ``@include`` lines replaced by the helpers they name, each with
    the file and line number it comes from (what the Lua linter reports against)."""
    text = files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
    lines: list[tuple[str, str, int]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith(_INCLUDE):
            lines += expanded(line[len(_INCLUDE) :].strip().removesuffix(".lua"))
        else:
            lines.append((line, f"{name}.lua", number))
    return lines


@functools.cache
def source(name: str) -> str:
    """The text of ``lua/<name>.lua`` with its ``@include`` lines replaced by the helpers they name."""
    return "".join(f"{line}\n" for line, _, _ in expanded(name))


def register(client: redis.Redis, name: str) -> redis.commands.core.Script:
    """``lua/<name>.lua`` registered on ``client`` (EVALSHA, loaded on first use)."""
    return client.register_script(source(name))


def pipelined(
    client: Any,
    calls: Sequence[tuple[Any, list[str], list[Any]]],
    before: Sequence[tuple[Any, ...]] = (),
    after: Sequence[tuple[Any, ...]] = (),
) -> list[Any]:
    """Plain commands ``before`` (each ``(name, *args)``), then script calls ``(script, keys, args)``, then plain
    commands ``after``, in one pipeline; their replies. The calls go as raw EVALSHA (a pipeline given script
    objects asks SCRIPT EXISTS first, a round trip of its own each time; a Redis Cluster's pipeline refuses
    them), each to the node of its keys' slot on a cluster. One that finds its script not loaded (a Redis
    restarted or flushed, a new master after a failover) is made again on its own, which loads it."""
    with client.pipeline(transaction=False) as pipe:
        for command in before:
            pipe.execute_command(*command)
        for script, keys, args in calls:
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        for command in after:
            pipe.execute_command(*command)
        replies = list(pipe.execute(raise_on_error=False))
    for i, (script, keys, args) in enumerate(calls, len(before)):
        if isinstance(replies[i], redis.exceptions.NoScriptError):
            replies[i] = script(keys=keys, args=args)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


class InboxGrew(AgentsCeleryError):
    """A completing commit was refused: a user message reached the run's inbox during its last step (the engine
    goes on with another model turn instead of ending the run)."""

    code = "inbox_grew"


_REFUSALS: dict[str, type[AgentsCeleryError]] = {
    "INBOX": InboxGrew,
    "FENCED": FencedError,
    "NOTFOUND": RunNotFoundError,
    "ENDED": RunFinishedError,
    "CONFLICT": StateError,
    "EXISTS": StateError,
    "BUSY": RunBusyError,
}


def refusal(exc: redis.ResponseError, run_id: str) -> AgentsCeleryError | None:
    """The exception matching a script's refusal, or None when ``exc`` is some other Redis error."""
    text = str(exc)
    code = text.split(" ", 1)[0]
    cls = _REFUSALS.get(code)
    if cls is None:
        return None
    messages = {
        "FENCED": f"run {run_id!r}: the lease token is no longer current; another attempt owns the run",
        "NOTFOUND": f"run {run_id!r} does not exist",
        "ENDED": f"run {run_id!r} has already ended",
    }
    return cls(messages.get(code, f"run {run_id!r}: {text}"))
