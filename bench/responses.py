"""The OpenAI Responses API under /v1: token latency of its SSE, and how soon a ``starting_after`` resume answers.

- Token latency: as :mod:`bench.latency` (a FakeOpenAIServer stamps each token with its send time, ~300 tokens 5 ms
  apart, one real worker), read as ``POST /v1/responses`` with ``stream=true`` from a gunicorn API process, the
  client ``http.client`` reading lines as they arrive. Floor: XADD -> XREAD BLOCK across processes, p50, measured
  in the same run (before and after). Target <= 3x, as the other dialects. Beside it (info), the same runs read as
  ``GET /runs/<id>/events`` (the canonical dialect), interleaved, so the renderer's own cost shows under the load.
- Resume: on the finished response of one such run (about 310 events) and on one four times as long (about 1,220:
  1,200 words at once), the time from sending ``GET /v1/responses/<id>?stream=true&starting_after=N`` (N near the
  end) to its first event arriving. Floor: the same run's ``GET /runs/<id>/events?after=<offset>`` to its first
  event (what the other dialects' resume costs). Target <= 2x on both: the resume starts from the latest checkpoint
  of the renderer's fold that the live stream saved (:mod:`agents_celery.storage.renders`), so it does not grow
  with the response. Beside them (info), the same resumes with the checkpoints deleted before each: the fold from
  the segment's start, what every resume cost before the checkpoints.
"""

from __future__ import annotations

import http.client
import json
import time
import uuid
from typing import Any

from .common import Row, log, median, percentile, runtime_for
from .latency import door_window, sse_token_latencies

#: The words of the long response the resume is measured on too (about four times the short one's events).
LONG_WORDS = 1200


def responses_token_latencies(port: int, tokens: int) -> tuple[list[float], str, int]:
    """Latencies (ms) of every token of one streamed response; its id and last sequence number."""
    out: list[float] = []
    response_id, last = "", -1
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        # each create its own input: an identical body from the same caller within the retry window joins the
        # first request's response (http/responses/retry.py), and its stream would be a replay of that run
        body = json.dumps({"model": "streamer", "input": f"go {uuid.uuid4().hex}", "stream": True, "background": True})
        conn.request("POST", "/v1/responses", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.status
        while raw := resp.readline():
            line = raw.decode()
            if not line.startswith("data:"):
                continue
            if '"response.output_text.delta"' in line:
                now = time.time_ns()
                out.append((now - int(json.loads(line[5:])["delta"].strip())) / 1e6)
                continue
            event = json.loads(line[5:])
            last = event.get("sequence_number", last)
            if event["type"] == "response.created":
                response_id = event["response"]["id"]
    finally:
        conn.close()
    assert len(out) == tokens, f"expected {tokens} tokens over the Responses SSE, got {len(out)}"
    return out, response_id, last


def first_event_ms(port: int, path: str) -> float:
    """Milliseconds from sending a GET of ``path`` to the first SSE ``data:`` line arriving."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.connect()
        t0 = time.perf_counter()
        conn.request("GET", path, headers={"Accept": "text/event-stream"})
        resp = conn.getresponse()
        assert resp.status == 200, (path, resp.status)
        while raw := resp.readline():
            if raw.startswith(b"data:"):
                return (time.perf_counter() - t0) * 1000
        raise AssertionError(f"{path}: no event")
    finally:
        conn.close()


def streamed_response(port: int) -> tuple[str, int]:
    """Stream one response to its end (the model's answer is the server's current one); its id and last sequence
    number (the live stream saves the checkpoints a resume starts from)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    response_id, last = "", -1
    try:
        body = json.dumps(
            {"model": "streamer", "input": f"long {uuid.uuid4().hex}", "stream": True, "background": True}
        )
        conn.request("POST", "/v1/responses", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.status
        while raw := resp.readline():
            if raw.startswith(b"data:"):
                event = json.loads(raw[5:])
                last = event.get("sequence_number", last)
                if event["type"] == "response.created":
                    response_id = event["response"]["id"]
    finally:
        conn.close()
    return response_id, last


def resumes(port: int, rt: Any, response_id: str, last: int, n: int) -> tuple[float, float, float]:
    """Medians (ms) to the first event of ``n`` resumes near the end of the response: ``starting_after``, the same
    with the run's checkpoints deleted before each (folded from the start), and ``/runs/<id>/events?after=``; the
    first and the last interleaved, so the machine's drift hits both."""
    run_id = response_id.removeprefix("resp_").rpartition("_")[0]
    offset = rt.store.log.info(run_id).last_offset
    path = f"/v1/responses/{response_id}?stream=true&starting_after={last - 5}"
    cold = []
    for _ in range(n):
        rt.store.redis.delete(rt.store.keys.run(run_id).renders)
        cold.append(first_event_ms(port, path))
    first_event_ms(port, path)  # saves the checkpoints again (a resume renders and saves as a live stream does)
    warm, canonical = [], []
    for _ in range(n):
        warm.append(first_event_ms(port, path))
        canonical.append(first_event_ms(port, f"/runs/{run_id}/events?after={offset - 5}"))
    return median(warm), median(cold), median(canonical)


def run(quick: bool) -> list[Row]:
    from agents_celery.testing.openai_server import FakeReply

    samples, tokens, runs = 500, 300, 1 if quick else 3
    n_resumes = 20 if quick else 60
    with door_window("responses", samples, tokens) as w:
        port = w.port
        log(f"responses: {runs} streamed response(s) of {tokens} tokens, 5 ms apart")
        responses_token_latencies(port, tokens)  # warm-up
        rt = runtime_for(w.prefix, w.queue)
        lat: list[float] = []
        canonical_lat: list[float] = []
        for _ in range(runs):  # interleaved with the same runs read as /runs/<id>/events: the load hits both
            got, response_id, last = responses_token_latencies(port, tokens)
            lat += got
            canonical_lat += sse_token_latencies(rt, port, tokens)
        log(f"responses: {n_resumes} resumes near the end of a {last + 1}-event response")
        short = resumes(port, rt, response_id, last, n_resumes)
        w.server.responder = lambda _request: FakeReply(text="w " * LONG_WORDS)
        long_id, long_last = streamed_response(port)
        log(f"responses: {n_resumes} resumes near the end of a {long_last + 1}-event response")
        long = resumes(port, rt, long_id, long_last, n_resumes)
        rt.close()
    floor = w.floor
    return [
        Row("token latency p50, Responses SSE (/v1)", percentile(lat, 50), "ms",
            "XADD->XREAD BLOCK p50", percentile(floor, 50), "<=", 3.0, readme=True),
        Row("token latency p99, Responses SSE (/v1)", percentile(lat, 99), "ms",
            "XADD->XREAD BLOCK p99", percentile(floor, 99), "<=", None),
        Row("token latency p50, Responses SSE vs /runs/<id>/events SSE", percentile(lat, 50), "ms",
            "/runs SSE p50", percentile(canonical_lat, 50), "<=", None),
        Row(f"starting_after resume, first event ({last + 1}-event response)", short[0], "ms",
            "/runs/<id>/events?after= first event", short[2], "<=", 2.0),
        Row(f"starting_after resume, first event ({long_last + 1}-event response)", long[0], "ms",
            "/runs/<id>/events?after= first event", long[2], "<=", 2.0),
        Row(f"the same, {last + 1}-event response, folded from its start (no checkpoint) (info)", short[1], "ms",
            "/runs/<id>/events?after= first event", short[2], "<=", None),
        Row(f"the same, {long_last + 1}-event response, folded from its start (no checkpoint) (info)", long[1], "ms",
            "/runs/<id>/events?after= first event", long[2], "<=", None),
        Row(f"starting_after resume, {long_last + 1}- vs {last + 1}-event response (info)", long[0], "ms",
            f"the {last + 1}-event response's", short[0], "<=", None),
    ]  # fmt: skip
