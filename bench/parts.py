"""Images in a user message (docs/input.md): what a 1 MB image costs a run, stored once beside it.

One real worker serving :mod:`bench.agents`; the ``plain`` agent (a scripted model: a tool call, then an answer:
three steps, two model turns, each of which gets the image back from the run's record). Runs one after another,
alternating a text message and the same text with a 1 MB PNG as a data URL (``Runtime.run``: start to end, as the
caller sees it). Figures: the median wall time of the run with the image against the same run without it
(informational: what 1 MB costs, checked and decoded once by the caller, written once, read back by a model
turn, copied to the run's session at its end); and the bytes of the run's checkpoint (state JSON and
conversation list) after it ended, against what they would be with the image inline (target <= 1%).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from .common import Row, agents_worker, cli_main, log, median, prefixed, runtime_for

IMAGE = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(1_000_000)).decode()


def _message(with_image: bool) -> Any:
    text = {"type": "text", "text": "What is in this picture?"}
    return [text, {"type": "image_url", "image_url": {"url": IMAGE}}] if with_image else "What is in this picture?"


def _timed_run(rt: Any, with_image: bool) -> tuple[float, str]:
    t0 = time.perf_counter()
    view = rt.run("plain", _message(with_image), timeout=60)
    took = time.perf_counter() - t0
    assert view.status.value == "completed", f"{view.status} {view.error}"
    return took * 1000, view.run_id


def _checkpoint_bytes(rt: Any, run_id: str) -> int:
    k = rt.store.keys.run(run_id)
    state = rt.redis.hget(k.run, "state") or b""
    return len(state) + sum(len(m) for m in rt.redis.lrange(k.messages, 0, -1))


def run(quick: bool) -> list[Row]:
    rounds = 8 if quick else 25
    with prefixed("parts") as prefix:
        queue = f"{prefix}-agents"
        worker = agents_worker(prefix, queue, f"{prefix}-parts")
        try:
            worker.wait_ready()
            rt = runtime_for(prefix, queue)
            try:
                _timed_run(rt, False), _timed_run(rt, True)  # warm both paths
                text_ms, image_ms = [], []
                for _ in range(rounds):
                    text_ms.append(_timed_run(rt, False)[0])
                    took, run_id = _timed_run(rt, True)
                    image_ms.append(took)
                stored = _checkpoint_bytes(rt, run_id)
            finally:
                rt.close()
        finally:
            worker.stop()
    inline = stored + len(json.dumps(IMAGE))
    log(
        f"parts: run with a 1 MB image {median(image_ms):.1f} ms, text only {median(text_ms):.1f} ms (median of "
        f"{rounds}); checkpoint {stored} bytes, {inline} with the image inline"
    )
    return [
        Row("3-step run with a 1 MB image, median", median(image_ms), "ms", "same run, text only", median(text_ms)),
        Row("its checkpoint in Redis (state + conversation)", stored, "bytes", "the image inline", inline, "<=", 0.01),
    ]  # fmt: skip


if __name__ == "__main__":
    cli_main(run)
