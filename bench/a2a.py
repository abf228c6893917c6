"""A2A (``/a2a``): token latency of the streamed artifact chunks, and how soon ``SubscribeToTask`` answers.

- Token latency: as :mod:`bench.aisdk` (a FakeOpenAIServer stamps each token with its send time, ~300 tokens 5 ms
  apart, one real worker), read as ``SendStreamingMessage`` to ``POST /a2a/streamer`` from a gunicorn API process,
  ``http.client`` reading lines as they arrive. Floor: XADD -> XREAD BLOCK across processes, p50, measured in the
  same run (before and after). Target <= 3x, as the other dialects.
- Subscribe: while a long task streams, ``SubscribeToTask`` (what a client that lost its stream sends; the Task is
  folded from the whole log first) to its first frame, against the same run's ``GET /runs/<id>/events?after=`` to
  its first event, interleaved. Target <= 2x.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from typing import Any

from .common import Row, log, median, percentile, runtime_for
from .latency import door_window
from .responses import first_event_ms

HEADERS = {"Content-Type": "application/json", "A2A-Version": "1.0", "Accept": "text/event-stream"}


def _rpc(port: int, method: str, params: dict[str, Any]) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    conn.request("POST", "/a2a/streamer", json.dumps(body), HEADERS)
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    return conn, resp


def _send(port: int) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "go"}]}
    return _rpc(port, "SendStreamingMessage", {"message": message})


def task_token_latencies(port: int, tokens: int) -> list[float]:
    """Latencies (ms) of every artifact chunk of one streamed task."""
    out: list[float] = []
    conn, resp = _send(port)
    try:
        while raw := resp.readline():
            if raw.startswith(b"data:") and b'"artifactUpdate"' in raw:
                now = time.time_ns()
                parts = json.loads(raw[5:])["result"]["artifactUpdate"]["artifact"]["parts"]
                if parts and parts[0]["text"].strip():
                    out.append((now - int(parts[0]["text"].strip())) / 1e6)
    finally:
        conn.close()
    assert len(out) == tokens, f"expected {tokens} chunks over the A2A stream, got {len(out)}"
    return out


def first_subscribed_ms(port: int, task_id: str) -> float:
    """Milliseconds from sending ``SubscribeToTask`` to its first SSE ``data:`` line (the Task)."""
    t0 = time.perf_counter()
    conn, resp = _rpc(port, "SubscribeToTask", {"id": task_id})
    try:
        while raw := resp.readline():
            if raw.startswith(b"data:"):
                return (time.perf_counter() - t0) * 1000
        raise AssertionError("SubscribeToTask: no frame")
    finally:
        conn.close()


def live_subscribes(port: int, rt: Any, count: int) -> tuple[list[float], list[float]]:
    """While one task streams: ``count`` subscriptions to it and as many ``/runs/<id>/events?after=`` reads, each
    timed to its first frame, interleaved."""
    conn, resp = _send(port)
    first = json.loads(next(raw for raw in iter(resp.readline, b"") if raw.startswith(b"data:"))[5:])
    run_id = first["result"]["task"]["id"]
    reader = threading.Thread(target=lambda: [None for _ in iter(resp.readline, b"")], daemon=True)
    reader.start()
    subscribed: list[float] = []
    canonical: list[float] = []
    try:
        for _ in range(count):
            offset = rt.store.log.info(run_id).last_offset
            if rt.get(run_id).status.is_final:
                break  # terminal: SubscribeToTask answers an error now
            subscribed.append(first_subscribed_ms(port, run_id))
            canonical.append(first_event_ms(port, f"/runs/{run_id}/events?after={max(-1, offset - 5)}"))
    finally:
        reader.join(timeout=60)
        conn.close()
    assert len(subscribed) >= 5, f"only {len(subscribed)} subscriptions while the task streamed: make it longer"
    return subscribed, canonical


def run(quick: bool) -> list[Row]:
    samples, tokens, runs = 500, 300, 1 if quick else 3
    subscribes = 15 if quick else 30
    with door_window("a2a", samples, tokens) as w:
        log(f"a2a: {runs} streamed task(s) of {tokens} tokens, 5 ms apart")
        task_token_latencies(w.port, tokens)  # warm-up
        lat: list[float] = []
        for _ in range(runs):
            lat += task_token_latencies(w.port, tokens)
        rt = runtime_for(w.prefix, w.queue)
        log(f"a2a: {subscribes} subscriptions to a live task")
        subscribed, canonical = live_subscribes(w.port, rt, subscribes)
        rt.close()
    floor = w.floor
    return [
        Row("token latency p50, A2A artifact chunks", percentile(lat, 50), "ms",
            "XADD->XREAD BLOCK p50", percentile(floor, 50), "<=", 3.0, readme=True),
        Row("token latency p99, A2A artifact chunks", percentile(lat, 99), "ms",
            "XADD->XREAD BLOCK p99", percentile(floor, 99), "<=", None),
        Row("SubscribeToTask on a live task, first frame", median(subscribed), "ms",
            "/runs/<id>/events?after= first event", median(canonical), "<=", 2.0, readme=True),
    ]  # fmt: skip
