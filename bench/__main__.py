"""``python -m bench [--quick] [--only NAME ...] [--write FILE] [--readme FILE]``: run the benches, print one table.

Each row is a figure, the floor it is compared with (measured in the same run), their ratio, the target and
whether it is met. A bench that fails is reported as one row and the others still run. ``--write`` writes the
whole run (table, machine, time and load, method) as Markdown, ``--readme`` replaces a README's Performance
section with an excerpt of the same run (:mod:`bench.report`). Exit status: 0 every target met, 1 a target
missed, 2 a bench failed or something it needs is missing.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time
import traceback
from pathlib import Path

import redis

from agents_celery.errors import RedisUnavailableError

from .common import Row, log, missing, print_table, stop_all
from .report import RunInfo, document, readme_section, write_readme

BENCHES = [
    "eventlog", "steps", "latency", "tokens", "sse", "responses", "aisdk", "a2a", "recovery", "pool", "gevent",
    "langgraph_side", "listing", "schedules", "subagents", "history", "pydantic_ai", "openai_agents", "cluster", "mcp",
    "parts", "workflows",
]  # fmt: skip
#: Exit statuses.
MET, MISSED, FAILED = 0, 1, 2


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


def run_one(name: str, quick: bool) -> tuple[list[Row] | None, BaseException | None]:
    """The rows of one bench, or None and why it failed (its traceback on stderr)."""
    try:
        module = importlib.import_module(f"bench.{name}")
        return list(module.run(quick)), None
    except Exception as exc:
        traceback.print_exc()
        return None, exc
    finally:
        stop_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer samples (about 3 minutes in all)")
    parser.add_argument("--only", action="append", choices=BENCHES, metavar="NAME", help=f"one of {BENCHES}")
    parser.add_argument("--write", type=Path, metavar="FILE", help="write the whole run as Markdown to FILE")
    parser.add_argument("--readme", type=Path, metavar="FILE", help="replace FILE's '## Performance' section")
    args = parser.parse_args(argv)
    names = args.only or BENCHES
    problems = missing(names)
    if problems:
        for problem in problems:
            print(f"bench: cannot run: {problem}", file=sys.stderr)
        return FAILED
    info = RunInfo(benches=names, quick=args.quick)
    log(f"started {info.started}; {info.load_start}")
    rows: list[Row] = []
    failed = False
    started = time.monotonic()
    for name in names:
        t0 = time.monotonic()
        log(f"== {name}")
        got, failed_with = run_one(name, args.quick)
        if got is None and isinstance(failed_with, (redis.ConnectionError, RedisUnavailableError)):
            # The Redis is shared: another process's CLIENT KILL (a fault test) drops our connections too. One more
            # try, said in the output and the written run; a second failure is a failure.
            info.notes.append(f"{name}: run again after {type(failed_with).__name__}: {failed_with}")
            log(f"{name}: failed with {failed_with!r}; running it once more")
            got, failed_with = run_one(name, args.quick)
        if got is None:
            failed = True
            text = f"FAILED: {type(failed_with).__name__}: {failed_with}"[:120]
            got = [Row(f"{name} bench", None, "", skipped=text)]
        rows += got
        log(f"== {name} took {time.monotonic() - t0:.0f} s")
    info.finish(machine(), time.monotonic() - started)
    print(f"machine: {info.machine}")
    print(f"when: {info.started} to {info.ended}; load at the start: {info.load_start}; at the end: {info.load_end}")
    print(f"mode: {'quick' if args.quick else 'full'}; took {info.took:.0f} s; {info.code}")
    for note in info.notes:
        print(f"note: {note}")
    print_table(rows)
    if args.write:
        args.write.write_text(document(rows, info, BENCHES))
        log(f"wrote {args.write}")
    if args.readme:
        write_readme(args.readme, readme_section(rows, info))
        log(f"wrote the Performance section of {args.readme}")
    missed = [r.figure for r in rows if r.met is False]
    if missed:
        print(f"targets missed: {', '.join(missed)}")
    if failed:
        print("benches failed: " + ", ".join(r.figure for r in rows if r.skipped and r.skipped.startswith("FAILED")))
    return FAILED if failed else MISSED if missed else MET


if __name__ == "__main__":
    sys.exit(main())
