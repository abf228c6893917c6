"""The bench's report is its own output: a missed target fails the run, and the files it writes say what it printed.

A stand-in bench module (no workers) returns fixed rows; ``python -m bench``'s ``main`` runs it as it runs the real
ones. Uses the Redis the benches use (``BENCH_REDIS_URL``) only for the start-up check and the machine line.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

import bench.__main__ as bench_main
from bench import common
from bench.common import Row
from bench.report import write_readme

pytestmark = pytest.mark.timeout(60)

README = """# Project

Intro.

## Performance

| figure | value | met? |
|---|---|---|
| durable step | 2.63 ms | noise, see docs |

## Troubleshooting

Unchanged.
"""


def _fake_bench(monkeypatch: pytest.MonkeyPatch, rows: list[Row]) -> None:
    module = types.ModuleType("bench.fake")
    module.__doc__ = "A stand-in bench: fixed rows."
    module.run = lambda quick: rows  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bench.fake", module)
    monkeypatch.setattr(bench_main, "BENCHES", ["fake"])


def test_a_missed_target_fails_the_run_and_both_files_say_no(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        Row("durable step", 2.63, "ms", "bare Celery chain hop", 2.39, "<=", 1.0, readme=True),
        Row("token latency p50", 1.0, "ms", "XADD->XREAD p50", 0.5, "<=", 3.0, readme=True),
        Row("an info row", 1.0, "ms"),
    ]
    _fake_bench(monkeypatch, rows)
    doc, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    readme.write_text(README)

    status = bench_main.main(["--only", "fake", "--write", str(doc), "--readme", str(readme)])

    assert status == bench_main.MISSED
    printed = capsys.readouterr().out
    assert "targets missed: durable step" in printed
    table_line = next(line for line in printed.splitlines() if line.startswith("| durable step "))
    assert table_line.rstrip().endswith("| NO   |")
    text = doc.read_text()
    assert "1.10x" in text and "| NO" in text and "1 of 2 targets missed" in text
    assert "load average" in text and "UTC" in text and "A stand-in bench: fixed rows." in text
    section = readme.read_text().split("## Performance", 1)[1].split("## Troubleshooting", 1)[0]
    assert "| durable step | 2.63 ms | bare Celery chain hop | 2.39 ms | 1.10x | <= 1x | NO |" in section
    assert "noise" not in section and "an info row" not in section and "targets missed" in section
    assert readme.read_text().startswith("# Project\n\nIntro.\n\n## Performance\n")
    assert readme.read_text().endswith("## Troubleshooting\n\nUnchanged.\n")


def test_every_target_met_exits_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_bench(monkeypatch, [Row("durable step", 0.9, "ms", "hop", 1.0, "<=", 1.0)])
    assert bench_main.main(["--only", "fake"]) == bench_main.MET


def test_a_failing_bench_exits_two(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(quick: bool) -> list[Row]:
        raise RuntimeError("worker did not start")

    _fake_bench(monkeypatch, [])
    monkeypatch.setattr(sys.modules["bench.fake"], "run", broken)
    assert bench_main.main(["--only", "fake"]) == bench_main.FAILED


def test_a_missing_module_stops_the_run_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_bench(monkeypatch, [Row("never", 1.0, "ms")])
    monkeypatch.setitem(common.NEEDS, "fake", ("no_such_module_for_the_bench",))
    assert bench_main.main(["--only", "fake"]) == bench_main.FAILED
    err = capsys.readouterr().err
    assert "no_such_module_for_the_bench" in err and "make install" in err


def test_write_readme_needs_the_section(tmp_path: Path) -> None:
    path = tmp_path / "README.md"
    path.write_text("# Project\n\nNo performance section.\n")
    with pytest.raises(SystemExit, match="Performance"):
        write_readme(path, "## Performance\n\nx\n")
