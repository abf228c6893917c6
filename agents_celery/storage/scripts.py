"""The Lua scripts: every state change of a run happens inside Redis, atomically, in one of ``lua/*.lua``.

Each file documents its KEYS and ARGV at the top. A line ``-- @include _name.lua`` pulls in a helper
(``_append``, ``_guard``, ``_expire``); :func:`source` expands them once and caches the text. Key layout is in
:mod:`agents_celery.storage.keys`. Scripts signal refusals with an error reply whose first word is a code
(``FENCED``, ``NOTFOUND``, ``ENDED``, ``EXISTS``, ``CONFLICT``, ``BUSY``, ``INBOX``); :func:`refusal` turns it into the
matching exception. Each script touches the keys of one run (or one session) only: one hash tag, one slot.
"""

from __future__ import annotations

import functools
from importlib.resources import files

import redis

from ..errors import AgentsCeleryError, FencedError, RunBusyError, RunFinishedError, RunNotFoundError, StateError

_INCLUDE = "-- @include "


@functools.cache
def source(name: str) -> str:
    """The text of ``lua/<name>.lua`` with its ``@include`` lines replaced by the helpers they name."""
    text = files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
    lines = []
    for line in text.splitlines():
        if line.startswith(_INCLUDE):
            lines.append(source(line[len(_INCLUDE) :].strip().removesuffix(".lua")))
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


def register(client: redis.Redis, name: str) -> redis.commands.core.Script:
    """``lua/<name>.lua`` registered on ``client`` (EVALSHA, loaded on first use)."""
    return client.register_script(source(name))


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
