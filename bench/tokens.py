"""Worker CPU per streamed token (#44 point 3): what a model token costs the worker, against a floor in the same run.

Figure: a real worker (threads pool, concurrency 1) runs ``bench.agents.streamer`` against a FakeOpenAIServer
that streams ``TOKENS`` chunks with no delay between them; the worker's CPU time (``/proc``, all threads) over
the run divided by the tokens. The run's few steps cost a few ms in all, well under 1% of the run's CPU.
Floor (the issue's): one process reading the same stream from the same server with the openai SDK
(``chat.completions.create(stream=True)``, a pydantic chunk object per token) and XADDing each chunk's text to a
Redis stream, pipelined 16 at a time; its own CPU time divided by the tokens. A strict floor (info): the same, but
the SDK's lines read raw as our ``OpenAIChat`` reads them (no chunk objects), the least a durable stream needs.
Both read the same server, which runs in this process, so neither pays for it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from agents_celery.events import EventType

from .common import (
    REDIS_URL,
    ROOT,
    Row,
    agents_worker,
    cli_main,
    client,
    cpu_seconds,
    log,
    median,
    prefixed,
    runtime_for,
)

TOKENS = 10_000
#: XADDs per pipeline in the floor.
BATCH = 16


def floor_reader(url: str, key: str, raw: bool) -> None:
    """The floor's process: read the stream with the openai SDK, XADD each chunk's text; twice (the first warms the
    SDK's lazy imports and its connection up), printing the second pass's CPU seconds and token count. ``raw``:
    the SDK makes the request and its lines are read raw (``with_streaming_response``, a ``json.loads`` a line)
    instead of the SDK's own chunk objects."""
    import openai

    r = client(REDIS_URL)
    sdk = openai.OpenAI(base_url=url, api_key="k", max_retries=0)
    messages: Any = [{"role": "user", "content": "go"}]
    for _ in range(2):
        t0 = time.process_time()
        count = 0
        pipe = r.pipeline(transaction=False)
        for text in _raw_texts(sdk, messages) if raw else _sdk_texts(sdk, messages):
            pipe.xadd(key, {"d": text})
            count += 1
            if len(pipe) >= BATCH:
                pipe.execute()
        pipe.execute()
        cpu = time.process_time() - t0
    r.delete(key)
    print(json.dumps({"cpu": cpu, "tokens": count}))


def _sdk_texts(sdk: Any, messages: Any) -> Iterator[str]:
    for chunk in sdk.chat.completions.create(model="fake-model", messages=messages, stream=True):
        for choice in chunk.choices:
            if choice.delta.content:
                yield choice.delta.content


def _raw_texts(sdk: Any, messages: Any) -> Iterator[str]:
    create = sdk.chat.completions.with_streaming_response.create
    with create(model="fake-model", messages=messages, stream=True) as response:
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    yield text


def _floor(url: str, key: str, raw: bool = False) -> tuple[float, int]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.tokens", "--floor-reader", url, key, "raw" if raw else "sdk"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return float(got["cpu"]), int(got["tokens"])


def _one_run(rt: Any, pid: int) -> tuple[float, int]:
    """The worker's CPU seconds over one run of the streamer, and its text events."""
    before = cpu_seconds(pid)
    stream = rt.stream("streamer", "go")
    tokens = 0
    last = None
    for ev in stream.events():
        if ev.type is EventType.TEXT_MESSAGE_CONTENT:
            tokens += 1
        last = ev
    assert last is not None and last.type is EventType.RUN_FINISHED, last
    time.sleep(0.2)  # the worker's last commit and ack, after the reader saw the end
    return cpu_seconds(pid) - before, tokens


def run(quick: bool) -> list[Row]:
    from agents_celery.testing.openai_server import FakeOpenAIServer, FakeReply

    runs = 3 if quick else 7
    server = FakeOpenAIServer(lambda request: FakeReply(text="tok " * TOKENS, token_delay=0.0)).start()
    ours: list[float] = []
    floors: list[float] = []
    raws: list[float] = []
    try:
        with prefixed("tokens") as prefix:
            queue = f"{prefix}-agents"
            worker = agents_worker(prefix, queue, f"{prefix}-tok", {"FAKE_OPENAI_URL": server.url})
            try:
                worker.wait_ready()
                rt = runtime_for(prefix, queue)
                _one_run(rt, worker.pid)  # warm-up: imports, connections, the SDK's client
                _floor(server.url, f"{prefix}:floor")
                log(f"tokens: {runs} runs of {TOKENS} tokens, each beside a floor reader of the same stream")
                for _ in range(runs):  # interleaved: a load that comes and goes hits both
                    cpu, events = _one_run(rt, worker.pid)
                    ours.append(cpu / TOKENS)  # per token the model sent (a coalesced delta is one event)
                    log(f"tokens: {cpu * 1000:.0f} ms worker CPU, {events} text events for {TOKENS} tokens")
                    cpu, tokens = _floor(server.url, f"{prefix}:floor")
                    floors.append(cpu / max(1, tokens))
                    cpu, tokens = _floor(server.url, f"{prefix}:floor", raw=True)
                    raws.append(cpu / max(1, tokens))
                rt.close()
            finally:
                worker.stop()
    finally:
        server.stop()
    us = 1e6
    return [
        Row("worker CPU per streamed token", median(ours) * us, "us",
            "openai SDK reading the stream + pipelined XADD", median(floors) * us, "<=", 1.5, readme=True),
        Row("worker CPU per streamed token, strict floor (info)", median(ours) * us, "us",
            "the SDK's request, its lines read raw + pipelined XADD", median(raws) * us, "<=", None),
    ]  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--floor-reader":
        floor_reader(sys.argv[2], sys.argv[3], raw=sys.argv[4] == "raw")
    else:
        cli_main(run)
