"""The Vercel AI SDK's chat stream (``/aisdk``): token latency, and how soon a reload's resume answers.

- Token latency: as :mod:`bench.responses` (a FakeOpenAIServer stamps each token with its send time, ~300 tokens
  5 ms apart, one real worker), read as ``POST /aisdk/streamer`` from a gunicorn API process, ``http.client``
  reading lines as they arrive. Floor: XADD -> XREAD BLOCK across processes, p50, measured in the same run (before
  and after). Target <= 3x, as the other dialects.
- Resume: while a run streams, ``GET /aisdk/streamer/<chat>/stream`` (what ``useChat`` with ``resume: true`` asks
  after a reload; it replays the live message from its start) to its first chunk, against the same run's
  ``GET /runs/<id>/events?after=<offset>`` to its first event, interleaved. Target <= 2x: the replay starts at the
  message's start, it does not re-read the log before it.
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


def _post(port: int, chat: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    message = {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": "go"}]}
    conn.request(
        "POST", "/aisdk/streamer", json.dumps({"id": chat, "messages": [message]}), {"Content-Type": "application/json"}
    )
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    return resp


def chat_token_latencies(port: int, tokens: int) -> list[float]:
    """Latencies (ms) of every token of one chat message's stream."""
    out: list[float] = []
    resp = _post(port, uuid.uuid4().hex)
    while raw := resp.readline():
        if raw.startswith(b"data:") and b'"text-delta"' in raw:
            now = time.time_ns()
            out.append((now - int(json.loads(raw[5:])["delta"].strip())) / 1e6)
    assert len(out) == tokens, f"expected {tokens} tokens over the AI SDK stream, got {len(out)}"
    return out


def live_resumes(port: int, rt: Any, count: int) -> tuple[list[float], list[float]]:
    """While one run streams: ``count`` resumes of its chat and as many ``/runs/<id>/events?after=`` reads, each
    timed to its first event, interleaved."""
    chat = uuid.uuid4().hex
    resp = _post(port, chat)
    run_id = resp.getheader("x-workflow-run-id") or ""
    reader = threading.Thread(target=lambda: [None for _ in iter(resp.readline, b"")], daemon=True)
    reader.start()
    resumed: list[float] = []
    canonical: list[float] = []
    try:
        for _ in range(count):
            offset = rt.store.log.info(run_id).last_offset
            if rt.get(run_id).status.is_final:
                break  # nothing live to resume any more (204)
            resumed.append(first_event_ms(port, f"/aisdk/streamer/{chat}/stream"))
            canonical.append(first_event_ms(port, f"/runs/{run_id}/events?after={max(-1, offset - 5)}"))
    finally:
        reader.join(timeout=60)
    assert len(resumed) >= 5, f"only {len(resumed)} resumes while the message streamed: make it longer"
    return resumed, canonical


def run(quick: bool) -> list[Row]:
    samples, tokens, runs = 500, 300, 1 if quick else 3
    resumes = 15 if quick else 30
    with door_window("aisdk", samples, tokens) as w:
        log(f"aisdk: {runs} streamed message(s) of {tokens} tokens, 5 ms apart")
        chat_token_latencies(w.port, tokens)  # warm-up
        lat: list[float] = []
        for _ in range(runs):
            lat += chat_token_latencies(w.port, tokens)
        rt = runtime_for(w.prefix, w.queue)
        log(f"aisdk: {resumes} resumes of a live message")
        resumed, canonical = live_resumes(w.port, rt, resumes)
        rt.close()
    floor = w.floor
    return [
        Row("token latency p50, AI SDK chat stream", percentile(lat, 50), "ms",
            "XADD->XREAD BLOCK p50", percentile(floor, 50), "<=", 3.0, readme=True),
        Row("token latency p99, AI SDK chat stream", percentile(lat, 99), "ms",
            "XADD->XREAD BLOCK p99", percentile(floor, 99), "<=", None),
        Row("resume of a live message, first chunk", median(resumed), "ms",
            "/runs/<id>/events?after= first event", median(canonical), "<=", 2.0, readme=True),
    ]  # fmt: skip
