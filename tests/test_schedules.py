"""Schedules fired by Celery beat: real ``agents-celery beat`` processes (two at once, one killed with -9), real
workers, real Redis; plus the firing rules driven directly, and the schedules over HTTP and the CLI."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents_celery import RunStatus, Runtime, ScheduleNotFoundError, ValidationError
from agents_celery.cli.processes import stop_process

from .conftest import wait_for
from .support.apis import SharedApis
from .support.workers import ROOT, Deployment


@pytest.fixture
def own(deploy: Any) -> Iterator[tuple[Deployment, Runtime]]:
    """A key prefix and queue of their own: these beats and workers see only this test's schedules."""
    deployment: Deployment = deploy("sched")
    runtime = Runtime(settings=deployment.settings, agents=[])
    yield deployment, runtime
    runtime.close()


class Beat:
    """One ``agents-celery beat`` process, with a schedule file of its own."""

    def __init__(self, env: dict[str, str]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="beat-"))
        self.log = (self.dir / "beat.log").open("wb")
        cmd = [sys.executable, "-m", "agents_celery.cli", "beat", "-s", str(self.dir / "schedule"), "-l", "INFO"]
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


def ticks(runtime: Runtime, schedule_id: str) -> list[int]:
    """The tick (ms) each run of the schedule was started for, in order."""
    runs = runtime.runs(limit=200).runs
    found = [runtime.store.load(r.run_id)[0] for r in runs if r.schedule_id == schedule_id]
    return sorted(s.scheduled_for or 0 for s in found)


def test_fire_rules_without_beat(own: tuple[Deployment, Runtime]) -> None:
    """Driven directly: one run per tick however often it is fired, and a missed stretch fires its last tick."""
    _, runtime = own
    runtime.store.agents.publish([{"name": "offline", "tools": []}])  # no worker needed: runs stay queued
    made = runtime.schedule("offline", "tick", every=2, name="two-seconds")
    first = made.next_at
    assert first is not None and first == made.created_at + 2000
    assert runtime.fire_schedules(first - 1) == pytest.approx(0.001, abs=0.01)  # nothing due yet
    assert ticks(runtime, made.schedule_id) == []
    for _ in range(3):  # two beats, or one firing again: still one run for the tick
        runtime.fire_schedules(first)
    assert ticks(runtime, made.schedule_id) == [first]
    assert runtime.get_schedule(made.schedule_id).next_at == first + 2000
    # Away for 7 s: the ticks at +2, +4, +6 s were missed; only the last one (+6 s) is fired.
    runtime.fire_schedules(first + 7000)
    assert ticks(runtime, made.schedule_id) == [first, first + 6000]
    assert runtime.get_schedule(made.schedule_id).next_at == first + 8000
    # Paused: due ticks fire nothing; resumed: goes on from the next tick after now.
    runtime.pause_schedule(made.schedule_id)
    runtime.fire_schedules(first + 20_000)
    assert ticks(runtime, made.schedule_id) == [first, first + 6000]
    resumed = runtime.pause_schedule(made.schedule_id, paused=False)
    assert not resumed.paused and resumed.next_at is not None and resumed.next_at > time.time() * 1000
    runtime.delete_schedule(made.schedule_id)
    with pytest.raises(ScheduleNotFoundError):
        runtime.get_schedule(made.schedule_id)
    with pytest.raises(ValidationError):
        runtime.schedule("offline", "x", cron="61 * * * *")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_beats_and_a_kill_start_every_tick_once(own: tuple[Deployment, Runtime]) -> None:
    deployment, runtime = own
    env, worker = deployment.env, deployment.worker()
    beats = [Beat(env), Beat(env)]
    try:
        wait_for(lambda: runtime.store.agents.get("offline") is not None, what="the agents to be published")
        made = runtime.schedule("offline", "tick", every=2)
        wait_for(lambda: len(ticks(runtime, made.schedule_id)) >= 3, timeout=30, what="three ticks")
        beats[0].kill()  # one beat dies mid-schedule; the other goes on
        wait_for(lambda: len(ticks(runtime, made.schedule_id)) >= 6, timeout=30, what="three more ticks")
        beats[1].kill()  # no beat at all: ticks are missed ...
        down = time.time()
        missed = wait_for(
            lambda: (s := runtime.get_schedule(made.schedule_id)).next_at and s.next_at < (time.time() - 4.5) * 1000,
            timeout=30,
            what="two ticks to pass with no beat",
        )
        before = ticks(runtime, made.schedule_id)
        beats.append(Beat(env))  # ... and one comes back: it fires the last missed tick once, then goes on
        wait_for(lambda: len(ticks(runtime, made.schedule_id)) >= len(before) + 2, timeout=30, what="ticks again")
        runtime.pause_schedule(made.schedule_id)
        got = ticks(runtime, made.schedule_id)
        assert len(got) == len(set(got)), f"a tick started twice: {got}"
        steps = [b - a for a, b in itertools.pairwise(got)]
        assert all(s % 2000 == 0 for s in steps), steps
        running = [s for s in steps if s == 2000]
        assert len(running) >= len(steps) - 1, f"only the beats' downtime may skip ticks: {steps}"
        (gap,) = [s for s in steps if s > 2000]  # the downtime: one catch-up tick, not one per missed tick
        assert gap >= 4000 and missed is not None and down > 0
        wait_for(
            lambda: all(r.status is RunStatus.COMPLETED for r in runtime.runs(limit=200).runs),
            timeout=30,
            what="every scheduled run to complete",
        )
        assert all(r.schedule_id == made.schedule_id for r in runtime.runs(limit=200).runs)
    finally:
        for beat in beats:
            beat.stop()
        worker.stop()


def test_schedules_over_http(apis: SharedApis) -> None:
    for front in ("flask", "django"):
        server = apis.get(front)
        with httpx.Client(base_url=server.url, timeout=10) as client:
            resp = client.post("/schedules", json={"agent_id": "offline", "message": "hi", "cron": "0 9 * * *"})
            assert resp.status_code == 201, resp.text
            made = resp.json()
            assert made["cron"] == "0 9 * * *" and made["next_at"] % 86_400_000 == 9 * 3_600_000
            sid = made["schedule_id"]
            assert sid in [s["schedule_id"] for s in client.get("/schedules").json()["schedules"]]
            assert client.post(f"/schedules/{sid}/pause").json()["paused"] is True
            assert client.get(f"/schedules/{sid}").json()["paused"] is True
            assert client.post(f"/schedules/{sid}/resume").json()["paused"] is False
            assert client.delete(f"/schedules/{sid}").status_code == 204
            assert client.get(f"/schedules/{sid}").json()["code"] == "schedule_not_found"
            both = {"agent_id": "offline", "message": "hi", "cron": "* * * * *", "every_seconds": 5}
            assert client.post("/schedules", json=both).status_code == 422
            bad = client.post("/schedules", json={"agent_id": "offline", "message": "hi", "cron": "99 * * * *"})
            assert bad.status_code == 422 and "not in 0-59" in bad.json()["detail"]
            nobody = client.post("/schedules", json={"agent_id": "nobody", "message": "hi", "every_seconds": 5})
            assert nobody.status_code == 404


def test_schedules_from_the_cli(worker: Any, worker_env: dict[str, str]) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "agents_celery.cli", "schedules", *args]
        return subprocess.run(cmd, env=worker_env, cwd=ROOT, capture_output=True, text=True, timeout=60)

    added = cli("add", "offline", "nightly digest", "--cron", "0 3 * * *", "--name", "digest")
    assert added.returncode == 0, added.stderr
    sid = added.stdout.strip()
    listed = cli("--json")
    mine = [json.loads(line) for line in listed.stdout.splitlines() if sid in line]
    assert mine[0]["name"] == "digest" and mine[0]["cron"] == "0 3 * * *"
    assert "paused" in cli("pause", sid).stdout
    assert cli("delete", sid).returncode == 0
    assert sid not in cli().stdout
    wrong = cli("add", "offline", "x")
    assert wrong.returncode == 2 and "--cron" in wrong.stderr
