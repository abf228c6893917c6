"""Event log throughput against raw Redis Streams, in the same run.

Each floor is the least Redis work that writes or reads the same entries:

- ``EventLog.append`` one event per call (one script call: the lease check, then HINCRBY + XADD) against raw
  ``XADD`` one per round trip;
- ``EventLog.append`` of 50 events per call against a bare Lua script doing what the append does to the stream
  and nothing else: one HINCRBY for 50 contiguous offsets and 50 ``XADD`` with those ids, one call (no lease
  check, no run status). The ratio is what the fencing and the Python side cost. (Raw ``XADD`` pipelined in
  50s, the floor before, sends 50 commands where the append sends one, and so did more work than the figure.);
- ``EventLog.read`` of 10,000 events (XRANGE plus decoding into ``Event`` objects) against raw ``XRANGE``.

Payload: the same TEXT_MESSAGE_CONTENT JSON in all.
"""

from __future__ import annotations

import uuid

from agents_celery.events import EventType, make_event
from agents_celery.storage.eventlog import EventLog
from agents_celery.storage.keys import Keys
from agents_celery.storage.leases import Leases

from .common import Row, cli_main, client, log, median, prefixed, timed

BATCH = 50
REPLAY = 10_000

#: The append's stream writes alone (storage/lua/_append.lua without the guard): KEYS counter hash, stream.
BARE_APPEND = """
local n = #ARGV
local first = redis.call('HINCRBY', KEYS[1], 'next', n) - n
for i = 1, n do
  redis.call('XADD', KEYS[2], (first + i - 1) .. '-1', 'event', ARGV[i])
end
return first
"""


def run(quick: bool) -> list[Row]:
    singles = 1500 if quick else 5000
    batched = 10_000 if quick else 40_000
    repeats = 3 if quick else 5
    with prefixed("eventlog") as prefix:
        r = client()
        keys = Keys(prefix)
        log_ = EventLog(r, keys, retention_ms=600_000, tombstone_ms=600_000)
        leases = Leases(r, keys)
        event = make_event(EventType.TEXT_MESSAGE_CONTENT, message_id="msg_bench", delta="hello ")
        payload = event.json

        def new_run() -> tuple[str, str]:
            run_id = uuid.uuid4().hex
            log_.create(run_id, "s", "a")
            token = leases.acquire(run_id, 600_000)
            assert token is not None
            return run_id, token

        def raw_single() -> float:
            key = f"{prefix}:raw:{uuid.uuid4().hex}"
            t = timed(lambda: [r.xadd(key, {"event": payload}) for _ in range(singles)])
            r.delete(key)
            return singles / t

        bare_append = r.register_script(BARE_APPEND)

        def raw_batched() -> float:
            key = f"{prefix}:raw:{uuid.uuid4().hex}"
            counter = f"{key}:next"
            args = [payload] * BATCH
            t = timed(lambda: [bare_append(keys=[counter, key], args=args) for _ in range(batched // BATCH)])
            assert r.xlen(key) == batched
            r.delete(key, counter)
            return batched / t

        def append_single() -> float:
            run_id, token = new_run()
            t = timed(lambda: [log_.append(run_id, [event], token) for _ in range(singles)])
            return singles / t

        def append_batched() -> float:
            run_id, token = new_run()
            batch = [event] * BATCH
            t = timed(lambda: [log_.append(run_id, batch, token) for _ in range(batched // BATCH)])
            return batched / t

        # Interleave floor and figure so drift hits both alike; keep the medians.
        log("eventlog: appends")
        results: dict[str, list[float]] = {k: [] for k in ("raw1", "app1", "rawN", "appN")}
        for _ in range(repeats):
            results["raw1"].append(raw_single())
            results["app1"].append(append_single())
            results["rawN"].append(raw_batched())
            results["appN"].append(append_batched())

        log("eventlog: replay")
        run_id, token = new_run()
        for _ in range(REPLAY // BATCH):
            log_.append(run_id, [event] * BATCH, token)
        stream_key = keys.run(run_id).events
        raw_replay, log_replay = [], []
        for _ in range(repeats):
            t = timed(lambda: r.xrange(stream_key))
            raw_replay.append(REPLAY / t)
            t = timed(lambda: log_.read(run_id))
            log_replay.append(REPLAY / t)
        assert len(log_.read(run_id)) == REPLAY
        r.close()

    return [
        Row("EventLog.append, 1 event per call", median(results["app1"]), "ev/s",
            "raw XADD, 1 per round trip", median(results["raw1"]), ">=", None),
        Row(f"EventLog.append, {BATCH} per call", median(results["appN"]), "ev/s",
            f"bare Lua: HINCRBY + {BATCH} XADDs per call", median(results["rawN"]), ">=", 0.5, readme=True),
        Row(f"EventLog.read of {REPLAY:,} events", median(log_replay), "ev/s",
            f"raw XRANGE of {REPLAY:,}", median(raw_replay), ">=", None),
    ]  # fmt: skip


if __name__ == "__main__":
    cli_main(run)
