"""``python -m bench.speed``: this machine's bare Celery hop, in milliseconds, as one line ``bare hop N.NN ms``.

The same floor ``python -m bench --only steps`` measures (a task that SETs a key and enqueues the next, on a
threads worker of concurrency 1, :mod:`bench.hop`), alone and in about ten seconds: ``.ci/run`` prints it in its
budget line, so a run's minutes can be read against the machine's speed (docs/testing.md).
"""

from __future__ import annotations

import sys
import uuid
from statistics import median

from .common import bench_env, celery_worker, stop_all
from .steps import hop_chain

HOPS = 50
ROUNDS = 5


def bare_hop_ms() -> float:
    """The median of ``ROUNDS`` chains of ``HOPS`` hops, milliseconds per hop (after one warm-up chain)."""
    from .hop import configure

    prefix = f"bench-speed-{uuid.uuid4().hex[:6]}"
    queue = f"{prefix}-hop"
    worker = celery_worker("bench.hop", bench_env(prefix, queue), queue, queue)
    try:
        worker.wait_ready()
        configure(prefix, queue)
        hop_chain(prefix, 5)
        return median(hop_chain(prefix, HOPS) / HOPS for _ in range(ROUNDS)) * 1000
    finally:
        stop_all()


def main() -> int:
    print(f"bare hop {bare_hop_ms():.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
