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

from .common import Row, log, missing, print_table, stop_all
from .report import RunInfo, document, readme_section, write_readme

BENCHES = ["eventlog", "steps", "latency", "sse", "recovery", "pool", "listing", "schedules", "subagents"]
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
    info.finish(machine(), time.monotonic() - started)
    print(f"machine: {info.machine}")
    print(f"when: {info.started} to {info.ended}; load at the start: {info.load_start}; at the end: {info.load_end}")
    print(f"mode: {'quick' if args.quick else 'full'}; took {info.took:.0f} s; {info.code}")
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
