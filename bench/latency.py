"""Token latency: from the model emitting a token to a client receiving it.

Floor: XADD in one process -> XREAD BLOCK wake-up in another (p50/p99 over ~500 samples), 5 ms apart like
the tokens.
Figure: a FakeOpenAIServer streams ~300 tokens, 5 ms apart, to a real worker (``bench.agents.streamer``); each
token's text is its send time (``time.time_ns()``, stamped as the chunk is written, not when the reply was
built); a client reading the run with ``Runtime.get_stream(id).events()`` subtracts it from its receive
time; so does an HTTP client of ``GET /runs/<id>/events`` on a gunicorn API process (when
``agents_celery.contrib.flask`` exists): ``http.client`` reading lines as they arrive (the target row), and httpx's
``iter_lines`` (info: its parsing adds ~0.3 ms per frame here). All processes read the same clock.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agents_celery.events import EventType

from .common import REDIS_URL, ROOT, Row, agents_worker, cli_main, client, log, percentile, prefixed, runtime_for

STAMP = "@T"
#: Seconds between tokens, and between the floor's XADDs: wake-up latency depends on how long the CPUs idled
#: before, so the floor is paced like the tokens it is compared with.
GAP = 0.005


# -- floor: XADD -> XREAD BLOCK across processes ----------------------------------------------------------------


def xadd_writer(key: str, count: int, gap: float) -> None:
    """The writer process: ``count`` XADDs carrying their send time, ``gap`` seconds apart."""
    r = client(REDIS_URL)
    for _ in range(count):
        time.sleep(gap)
        r.xadd(key, {"t": str(time.time_ns())})
    r.xadd(key, {"t": "end"})


def xread_floor(prefix: str, samples: int, gap: float = GAP) -> list[float]:
    """Wake-up latencies (ms) of a reader blocked in XREAD on entries another process XADDs."""
    key = f"{prefix}:floor"
    r = client()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.latency", "--xadd-writer", key, str(samples), str(gap)], cwd=ROOT
    )
    out: list[float] = []
    last = "0-0"
    try:
        while True:
            reply: Any = r.xread({key: last}, count=100, block=5000)
            now = time.time_ns()
            if not reply:
                raise RuntimeError("the XADD writer stopped sending")
            for _, entries in reply:
                for entry_id, fields in entries:
                    last = entry_id
                    if fields[b"t"] == b"end":
                        return out
                    out.append((now - int(fields[b"t"])) / 1e6)
    finally:
        proc.wait(timeout=30)
        r.delete(key)
        r.close()


# -- figure: model token -> client --------------------------------------------------------------------------------


def stamping_server(tokens: int, delay: float) -> Any:
    """A FakeOpenAIServer whose text chunks carry the time they are written (see module doc)."""
    from agents_celery.testing import openai_server as testing
    from agents_celery.testing.openai_server import FakeOpenAIServer, FakeReply

    completion = testing._Completion
    if not getattr(completion, "_bench_stamped", False):
        original = completion.stream_events

        def stream_events(self: Any, reply: FakeReply) -> Iterator[dict[str, Any]]:
            for event in original(self, reply):
                for choice in event.get("choices") or []:
                    content = (choice.get("delta") or {}).get("content")
                    if content and STAMP in content:
                        choice["delta"]["content"] = content.replace(STAMP, str(time.time_ns()))
                yield event

        completion.stream_events = stream_events  # type: ignore[method-assign]
        completion._bench_stamped = True  # type: ignore[attr-defined]

    def responder(request: dict[str, Any]) -> FakeReply:
        time.sleep(0.2)  # lets an HTTP reader subscribe before the first token
        return FakeReply(text=f"{STAMP} " * tokens, token_delay=delay)

    return FakeOpenAIServer(responder).start()


@dataclass
class DoorWindow:
    """What a door's token bench runs against (:func:`door_window`)."""

    prefix: str
    queue: str
    #: The API's port.
    port: int
    #: The stamping model server (its ``responder`` may be swapped).
    server: Any
    #: XADD -> XREAD BLOCK latencies (ms), measured before the door's runs and again after them.
    floor: list[float] = field(default_factory=list)


@contextmanager
def door_window(name: str, samples: int, tokens: int) -> Iterator[DoorWindow]:
    """The window a door's bench (:mod:`bench.responses`, :mod:`bench.aisdk`, :mod:`bench.a2a`) measures in: the
    XADD -> XREAD BLOCK floor (``samples``, and half as many again when the block ends, so a drift hits both), a
    model server stamping ``tokens`` tokens 5 ms apart, one agents worker and one API process."""
    from .sse import start_api

    with prefixed(name) as prefix:
        log(f"{name}: XADD -> XREAD BLOCK floor")
        floor = xread_floor(prefix, samples)
        server = stamping_server(tokens, GAP)
        queue = f"{prefix}-agents"
        worker = agents_worker(prefix, queue, f"{prefix}-{name}", {"FAKE_OPENAI_URL": server.url})
        api: Any = None
        try:
            worker.wait_ready()
            api, port = start_api(prefix, queue)
            window = DoorWindow(prefix, queue, port, server, floor)
            yield window
            floor += xread_floor(prefix, samples // 2)
        finally:
            if api is not None:
                api.stop()
            worker.stop()
            server.stop()


def token_latencies(rt: Any, tokens: int) -> list[float]:
    """Latencies (ms) of every token of one run, read through the Runtime."""
    stream = rt.stream("streamer", "go")
    out: list[float] = []
    last = None
    for ev in stream.events():
        if ev.type is EventType.TEXT_MESSAGE_CONTENT:
            now = time.time_ns()
            out.append((now - int(ev.data["delta"].strip())) / 1e6)
        last = ev
    assert last is not None and last.type is EventType.RUN_FINISHED, last
    assert len(out) == tokens, f"expected {tokens} tokens, got {len(out)}"
    return out


def sse_token_latencies(rt: Any, port: int, tokens: int, client: str = "stdlib") -> list[float]:
    """Latencies (ms) of every token of one run, read over HTTP SSE from the API (``GET /runs/<id>/events``).

    ``client="stdlib"``: ``http.client`` reading lines off the socket (what a minimal SSE client does; the time
    is taken when the frame's bytes arrive). ``client="httpx"``: httpx's ``iter_lines``, whose own parsing adds
    its cost to every frame.
    """
    import http.client
    import json

    import httpx

    stream = rt.stream("streamer", "go")
    out: list[float] = []

    def seen(line: str) -> None:
        if line.startswith("data:") and '"TEXT_MESSAGE_CONTENT"' in line:
            now = time.time_ns()
            out.append((now - int(json.loads(line[5:])["delta"].strip())) / 1e6)

    path = f"/runs/{stream.id}/events"
    if client == "httpx":
        with httpx.stream("GET", f"http://127.0.0.1:{port}{path}", timeout=60) as resp:
            resp.raise_for_status()
            for line in resp.iter_lines():
                seen(line)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("GET", path, headers={"Accept": "text/event-stream"})
            resp = conn.getresponse()
            assert resp.status == 200, resp.status
            while raw := resp.readline():
                seen(raw.decode())
        finally:
            conn.close()
    assert len(out) == tokens, f"expected {tokens} tokens over SSE ({client}), got {len(out)}"
    return out


def _on_gevent(prefix: str, queue: str, url: str, rt: Any, tokens: int, runs: int) -> list[float]:
    """The Runtime reader's token latencies with the runs on a ``--pool gevent`` worker instead (one warm-up run)."""
    worker = agents_worker(prefix, queue, f"{prefix}-lat-gevent", {"FAKE_OPENAI_URL": url}, pool="gevent")
    try:
        worker.wait_ready()
        log(f"latency: {runs} streamed run(s) on a gevent worker")
        token_latencies(rt, tokens)
        return [ms for _ in range(runs) for ms in token_latencies(rt, tokens)]
    finally:
        worker.stop()


def run(quick: bool) -> list[Row]:
    samples = 500
    tokens = 300
    runs = 1 if quick else 3
    have_api = importlib.util.find_spec("agents_celery.contrib.flask") is not None
    with prefixed("latency") as prefix:
        log("latency: XADD -> XREAD BLOCK floor")
        floor = xread_floor(prefix, samples)
        server = stamping_server(tokens, GAP)
        queue = f"{prefix}-agents"
        worker = agents_worker(prefix, queue, f"{prefix}-lat", {"FAKE_OPENAI_URL": server.url})
        try:
            worker.wait_ready()
            rt = runtime_for(prefix, queue)
            log(f"latency: {runs} streamed run(s) of {tokens} tokens, 5 ms apart")
            token_latencies(rt, tokens)  # warm-up: the worker's first HTTP connection and imports
            lat: list[float] = []
            for _ in range(runs):
                lat += token_latencies(rt, tokens)
            sse_lat: list[float] = []
            httpx_lat: list[float] = []
            if have_api:
                from .sse import start_api

                api, port = start_api(prefix, queue)
                try:
                    log(f"latency: {runs} run(s) read over HTTP SSE")
                    sse_token_latencies(rt, port, tokens)  # warm-up
                    for _ in range(runs):
                        sse_lat += sse_token_latencies(rt, port, tokens)
                        httpx_lat += sse_token_latencies(rt, port, tokens, client="httpx")
                finally:
                    api.stop()
            worker.stop()
            green = _on_gevent(prefix, queue, server.url, rt, tokens, runs)
            floor += xread_floor(prefix, samples // 2)  # the floor again, after: drift hits both
            rt.close()
        finally:
            worker.stop()
            server.stop()
    rows = [
        Row("token latency p50, Runtime reader", percentile(lat, 50), "ms",
            "XADD->XREAD BLOCK p50", percentile(floor, 50), "<=", 3.0, readme=True),
        Row("token latency p99, Runtime reader", percentile(lat, 99), "ms",
            "XADD->XREAD BLOCK p99", percentile(floor, 99), "<=", None),
    ]  # fmt: skip
    # A gevent worker's flusher waits up to green_batch_ms (5 ms) for other runs' tokens to share its round trip.
    rows.append(Row("token latency p50, Runtime reader, gevent worker (info)", percentile(green, 50), "ms",
                    "XADD->XREAD BLOCK p50", percentile(floor, 50), "<=", None))  # fmt: skip
    if not have_api:
        rows.append(Row("token latency p50, HTTP SSE reader", None, "ms", skipped="API not present"))
    else:
        rows += [
            Row("token latency p50, HTTP SSE reader", percentile(sse_lat, 50), "ms",
                "XADD->XREAD BLOCK p50", percentile(floor, 50), "<=", 3.0, readme=True),
            Row("token latency p99, HTTP SSE reader", percentile(sse_lat, 99), "ms",
                "XADD->XREAD BLOCK p99", percentile(floor, 99), "<=", None),
            # What the API adds on top of reading Redis directly (same worker, same runs' pacing).
            Row("token latency p50, HTTP SSE reader vs Runtime", percentile(sse_lat, 50), "ms",
                "Runtime reader p50", percentile(lat, 50), "<=", None),
            Row("token latency p50, HTTP SSE read with httpx (info)", percentile(httpx_lat, 50), "ms",
                "XADD->XREAD BLOCK p50", percentile(floor, 50), "<=", None),
        ]  # fmt: skip
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--xadd-writer":
        xadd_writer(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        cli_main(run)
