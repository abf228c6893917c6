"""``python -m bench [--quick] [--only NAME ...]``: run the benches and print one table.

Each row is a figure, the floor it is compared with (measured in the same run), their ratio, the target and
whether it is met. A bench that fails is reported as one row and the others still run.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time
import traceback

from .common import Row, log, print_table, stop_all

BENCHES = ["eventlog", "steps", "latency", "sse", "recovery", "pool", "listing", "schedules", "subagents"]


def machine() -> str:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "?")
    except OSError:
        pass
    try:
        from .common import client

        redis_version = str(client().info("server").get("redis_version", "?"))
    except Exception:
        redis_version = "unreachable"
    import os

    return (
        f"{os.cpu_count()} cores, {cpu}; Python {platform.python_version()}; Redis {redis_version}; "
        f"{platform.system()} {platform.release()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer samples (about 3 minutes in all)")
    parser.add_argument("--only", action="append", choices=BENCHES, metavar="NAME", help=f"one of {BENCHES}")
    args = parser.parse_args(argv)
    names = args.only or BENCHES
    rows: list[Row] = []
    failed = False
    started = time.monotonic()
    for name in names:
        t0 = time.monotonic()
        log(f"== {name}")
        try:
            module = importlib.import_module(f"bench.{name}")
            rows += module.run(args.quick)
        except Exception as exc:
            failed = True
            traceback.print_exc()
            rows.append(Row(f"{name} bench", None, "", skipped=f"FAILED: {type(exc).__name__}: {exc}"[:120]))
        finally:
            stop_all()
        log(f"== {name} took {time.monotonic() - t0:.0f} s")
    print(f"machine: {machine()}")
    print(f"mode: {'quick' if args.quick else 'full'}; took {time.monotonic() - started:.0f} s")
    print_table(rows)
    missed = [r.figure for r in rows if r.met is False]
    if missed:
        print(f"targets missed: {', '.join(missed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
