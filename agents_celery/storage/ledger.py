"""The effect ledger: one entry per tool call of a run, so a finished call is never run twice (rule 4).

Keys (see :mod:`agents_celery.storage.keys`): the run's ``effects`` hash (``tool_call_id`` -> JSON ``{status,
token, result, error}``), fenced by the run's ``lease``. Scripts: ``lua/effect_begin.lua``, ``effect_done.lua``,
``effect_rerun.lua``; a tool step's claim (``lua/claim.lua``) starts all of its calls at once, and a give-back
(``lua/give_back.lua``) forgets those its attempt never invoked.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import redis

from .keys import Keys
from .pending import Pending, SendAhead
from .replies import as_text
from .scripts import refusal, register


@dataclass(frozen=True)
class Effect:
    """An effect-ledger entry for one tool call."""

    status: Literal["started", "done"]
    result: str | None = None
    error: str | None = None


def parse_effect(raw: str) -> Effect | None:
    """An entry as the scripts return it ('' for none)."""
    if not raw:
        return None
    entry = json.loads(raw)
    return Effect(entry["status"], entry.get("result"), entry.get("error"))


class Ledger:
    """The effect ledger of every run (``RunStore.ledger``)."""

    def __init__(
        self, client: redis.Redis, keys: Keys, own: Callable[[], redis.Redis | None], send_ahead: SendAhead
    ) -> None:
        self.redis = client
        self.keys = keys
        #: The calling thread's own client on a worker (None: the shared one), as the run store's.
        self._own = own
        self._send_ahead = send_ahead
        self._begin = register(client, "effect_begin")
        self._done = register(client, "effect_done")
        self._rerun = register(client, "effect_rerun")
        #: Called with the run id after a call's ``started`` record (the failover fence, :mod:`.fence`).
        self.fence: Callable[[str], Any] | None = None

    def begin(self, run_id: str, tool_call_id: str, token: str) -> Effect | None:
        """Record that a tool call starts; return the existing entry instead when there is one."""
        return self._start(self._begin, run_id, [tool_call_id, token])

    def done(self, run_id: str, tool_call_id: str, token: str, result: str, error: str | None) -> bool:
        """Record a finished tool call's result (only the attempt that started it may)."""
        entry = json.dumps({"status": "done", "token": token, "result": result, "error": error})
        k = self.keys.run(run_id)
        return bool(self._done(keys=[k.effects], args=[tool_call_id, token, entry], client=self._own()))

    def done_sent(self, run_id: str, tool_call_id: str, token: str, result: str, error: str | None) -> Pending:
        """:meth:`done`, sent now and answered later: Redis records the result as soon as it reads the command,
        while the step goes on to build its commit; :meth:`Pending.wait` reads the answer."""
        entry = json.dumps({"status": "done", "token": token, "result": result, "error": error})
        k = self.keys.run(run_id)
        return self._send_ahead(self.redis, self._done, [k.effects], [tool_call_id, token, entry], True)

    def rerun(self, run_id: str, tool_call_id: str, token: str, approval: int) -> Effect | None:
        """Record that a human-approved re-run of a call that may have run starts (``approval``: how many times a
        human approved running it again). Each approval starts one execution: the entry that execution started,
        or a finished one, is returned instead (a retry after it died pauses the run again)."""
        return self._start(self._rerun, run_id, [tool_call_id, token, approval])

    def _start(self, script: Any, run_id: str, args: list[Any]) -> Effect | None:
        """Run a script that starts a call's entry under the run's lease (a lost lease: its refusal), then the
        failover fence; the entry found instead, if any."""
        k = self.keys.run(run_id)
        try:
            raw = as_text(script(keys=[k.effects, k.lease], args=args, client=self._own()))
        except redis.ResponseError as exc:
            mapped = refusal(exc, run_id)
            raise (mapped or exc) from None
        if self.fence:
            self.fence(run_id)
        return parse_effect(raw)
