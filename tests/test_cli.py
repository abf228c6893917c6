"""The ``agents-celery`` client commands as subprocesses: run, tail --after, stop, show, approvals through stdin."""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agents_celery import Runtime, ScriptedToolCall, ScriptedTurn
from agents_celery.events import EventType
from agents_celery.runs import RunStatus
from agents_celery.testing.openai_server import ScriptResponder

from .conftest import wait_for
from .support.workers import ROOT

CLI = [sys.executable, "-m", "agents_celery.cli"]


def cli(env: dict[str, str], *args: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env, cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )


def run_id_of(output: str) -> str:
    match = re.search(r"^run ([0-9a-f]{32}) ", output, re.MULTILINE)
    assert match, output
    return match.group(1)


def text_after(runtime: Runtime, run_id: str, after: int) -> str:
    """The assistant text carried by the events after ``after``."""
    events = runtime.store.log.read(run_id, after=after)
    return "".join(e.data["delta"] for e in events if e.type is EventType.TEXT_MESSAGE_CONTENT)


def _as_from_a_terminal() -> None:
    """In the CLI's child, before it execs: Ctrl-C, Ctrl-\\ and a hang-up at their defaults, as a shell's
    foreground job has them. A suite started in the background (``make test &``, a CI runner, nohup) ignores them,
    the child inherited that, and Python installs no KeyboardInterrupt handler for an ignored SIGINT: the Ctrl-C
    tests then waited for a prompt that could not come (SigIgn 0x1001006 in a CI run)."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _proc_status(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/status") as status:
            return status.read().splitlines()
    except OSError:
        return ["(the process had exited)"]


class LiveCLI:
    """A CLI process whose stdout is read line by line in a thread, so a test can wait on what it printed."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [*CLI, *args], env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, preexec_fn=_as_from_a_terminal,
        )  # fmt: skip
        self.chunks: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for chunk in iter(lambda: self.proc.stdout.read(1), ""):  # type: ignore[union-attr]
            self.chunks.append(chunk)

    @property
    def output(self) -> str:
        return "".join(self.chunks)

    def answer(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code, self.output, self.proc.stderr.read()

    def interrupt(self, prompt: str, timeout: float = 10) -> None:
        """Ctrl-C, as a terminal sends it, then wait for ``prompt``. A prompt that does not come says what the process
        printed and how its signals stood (a SIGINT ignored or blocked since its start shows in SigIgn / SigBlk)."""
        self.proc.send_signal(signal.SIGINT)
        try:
            wait_for(lambda: prompt in self.output, timeout, what=f"the prompt {prompt!r}")
        except AssertionError as exc:
            masks = [line for line in _proc_status(self.proc.pid) if line.startswith(("SigIgn", "SigBlk", "SigCgt"))]
            raise AssertionError(f"{exc}; the CLI printed {self.output[-1500:]!r}; {masks}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()


@pytest.fixture
def live(worker_env: dict[str, str]) -> Iterator[list[LiveCLI]]:
    started: list[LiveCLI] = []
    yield started
    for proc in started:
        proc.kill()


def test_run_streams_text_tool_calls_and_results(worker: Any, worker_env: dict[str, str], fake_openai: Any) -> None:
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("Let me check. ", [ScriptedToolCall("get_time", {"timezone": "UTC"})]), "It is noon in UTC."]
    )
    result = cli(worker_env, "run", "fake", "What time is it?")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Let me check." in out
    assert '⚙ get_time({"timezone": "UTC"})' in out
    assert "↳ 12:00 in UTC" in out
    assert "It is noon in UTC." in out
    assert re.search(r"✓ run [0-9a-f]{32} completed · agent fake · last offset \d+", out), out
    assert "\x1b[" not in out  # plain output when stdout is not a terminal


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        ("y\n", "↳ deleted /tmp/a.txt"),
        ('e\n{"path": "/tmp/b.txt"}\n', "↳ deleted /tmp/b.txt"),
        ("n\nnot this one\n", "not this one"),
    ],
    ids=["approve", "edit", "reject"],
)
def test_run_asks_before_a_tool_that_needs_confirmation(
    worker: Any, worker_env: dict[str, str], fake_openai: Any, answers: str, expected: str
) -> None:
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("Deleting. ", [ScriptedToolCall("delete_file", {"path": "/tmp/a.txt"})]), "Done."]
    )
    result = cli(worker_env, "run", "fake", "Delete /tmp/a.txt", stdin=answers)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert '? delete_file({"path": "/tmp/a.txt"}) needs your approval' in out
    assert "⏸ paused" in out
    assert expected in out, out
    assert "completed" in out
    if answers.startswith("n"):
        assert "deleted" not in out


def test_run_with_stdin_closed_at_the_prompt_leaves_the_run_paused(
    worker: Any, worker_env: dict[str, str], fake_openai: Any, runtime: Runtime
) -> None:
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/c.txt"})]), "Done."]
    )
    result = cli(worker_env, "run", "fake", "Delete /tmp/c.txt", stdin="")
    assert result.returncode == 0, result.stdout + result.stderr
    run_id = run_id_of(result.stdout)
    assert f"answer later with: agents-celery tail {run_id} --after" in result.stdout
    assert runtime.get(run_id).status is RunStatus.PAUSED
    # re-attach to the paused run and approve it from there
    tail = cli(worker_env, "tail", run_id, "--after", str(runtime.get(run_id).last_offset), stdin="y\n")
    assert tail.returncode == 0, tail.stdout + tail.stderr
    assert "↳ deleted /tmp/c.txt" in tail.stdout
    assert runtime.get(run_id).status is RunStatus.COMPLETED


def test_tail_after_n_prints_exactly_the_rest(
    worker: Any, worker_env: dict[str, str], fake_openai: Any, runtime: Runtime
) -> None:
    fake_openai.responder = ScriptResponder(["one two three four five six seven eight"])
    stream = runtime.stream("fake", "count")
    events = list(stream.events())
    assert events[-1].type is EventType.RUN_FINISHED
    after = next(e.offset for e in events if e.type is EventType.TEXT_MESSAGE_CONTENT) + 2
    result = cli(worker_env, "tail", stream.id, "--after", str(after))
    assert result.returncode == 0, result.stdout + result.stderr
    rest = text_after(runtime, stream.id, after)
    assert rest and rest in result.stdout
    assert "one two" not in result.stdout
    assert f"events after offset {after}" in result.stdout


def test_ctrl_c_then_detach_prints_how_to_reattach(
    worker: Any, worker_env: dict[str, str], fake_openai: Any, runtime: Runtime, live: list[LiveCLI]
) -> None:
    words = " ".join(f"w{i}" for i in range(40))
    fake_openai.responder = ScriptResponder([words], token_delay=0.05)
    proc = LiveCLI(worker_env, "run", "fake", "talk slowly")
    live.append(proc)
    run_id = wait_for(lambda: re.search(r"^run ([0-9a-f]{32}) ", proc.output, re.M), 30, what="the run line").group(1)
    wait_for(lambda: "w3" in proc.output, 30, what="some streamed text")
    proc.interrupt("[d]etach")
    proc.answer("d\n")
    code, out, err = proc.finish()
    assert code == 0, out + err
    match = re.search(rf"re-attach with: agents-celery tail {run_id} --after (\d+)", out)
    assert match, out
    after = int(match.group(1))
    tail = cli(worker_env, "tail", run_id, "--after", str(after))
    assert tail.returncode == 0, tail.stdout + tail.stderr
    assert text_after(runtime, run_id, after) in tail.stdout
    # what the first process printed plus what tail printed is the whole answer, each word once
    printed = out.split("\n", 1)[1].split("\ninterrupted")[0] + tail.stdout.split("\n", 1)[1].split("\n✓")[0]
    assert printed.split() == words.split()
    assert runtime.get(run_id).status is RunStatus.COMPLETED


def test_ctrl_c_then_stop_cancels_the_run(
    worker: Any, worker_env: dict[str, str], fake_openai: Any, runtime: Runtime, live: list[LiveCLI]
) -> None:
    fake_openai.responder = ScriptResponder([" ".join(f"s{i}" for i in range(200))], token_delay=0.05)
    proc = LiveCLI(worker_env, "run", "fake", "talk for long")
    live.append(proc)
    wait_for(lambda: "s2" in proc.output, 30, what="some streamed text")
    proc.interrupt("[s]top")
    proc.answer("s\n")
    code, out, err = proc.finish()
    assert code == 1, out + err
    run_id = run_id_of(out)
    assert f"✗ run {run_id} cancelled" in out
    assert runtime.get(run_id).status is RunStatus.CANCELLED


def test_show_and_stop_a_paused_run(
    worker: Any, worker_env: dict[str, str], fake_openai: Any, runtime: Runtime
) -> None:
    fake_openai.responder = ScriptResponder([ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/d"})])])
    stream = runtime.stream("fake", "delete /tmp/d")
    list(stream.events())
    assert runtime.get(stream.id).status is RunStatus.PAUSED
    shown = cli(worker_env, "show", stream.id)
    assert shown.returncode == 0, shown.stderr
    assert "status:   paused" in shown.stdout
    assert re.search(r'pending:\s+\S+ delete_file\(\{"path": "/tmp/d"\}\) \[confirmation_required\]', shown.stdout)
    as_json = json.loads(cli(worker_env, "show", stream.id, "--json").stdout)
    assert as_json["status"] == "paused" and as_json["pending"][0]["name"] == "delete_file"
    assert as_json["last_offset"] == runtime.get(stream.id).last_offset
    stopped = cli(worker_env, "stop", stream.id)
    assert stopped.returncode == 0, stopped.stderr
    assert "cancelled" in stopped.stdout
    assert "status:   cancelled" in cli(worker_env, "show", stream.id).stdout
    again = cli(worker_env, "stop", stream.id)
    assert again.returncode == 2
    assert "RunFinishedError" in again.stderr and stream.id in again.stderr


def test_bad_requests_exit_2_with_the_reason(worker: Any, worker_env: dict[str, str]) -> None:
    unknown = cli(worker_env, "run", "no-such-agent", "hi")
    assert unknown.returncode == 2
    assert "UnknownAgentError" in unknown.stderr and "no-such-agent" in unknown.stderr
    missing = cli(worker_env, "show", "0" * 32)
    assert missing.returncode == 2
    assert "RunNotFoundError" in missing.stderr


def test_run_tail_show_and_stop_over_the_http_api(apis: Any, worker_env: dict[str, str], fake_openai: Any) -> None:
    """``--url``: the same commands driven through an API process instead of Redis."""
    api = apis.get("flask")
    remote = {**worker_env, "AGENTS_CELERY_REDIS_URL": "redis://127.0.0.1:9/0"}  # no Redis: HTTP only
    fake_openai.responder = ScriptResponder(
        [ScriptedTurn("Deleting. ", [ScriptedToolCall("delete_file", {"path": "/tmp/url.txt"})]), "Done."]
    )
    result = cli(remote, "run", "fake", "Delete /tmp/url.txt", "--url", api.url, stdin="y\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "needs your approval" in result.stdout and "deleted /tmp/url.txt" in result.stdout
    run_id = run_id_of(result.stdout)
    tail = cli(remote, "tail", run_id, "--after", "3", "--url", api.url)
    assert tail.returncode == 0 and "Done." in tail.stdout, tail.stdout + tail.stderr
    shown = cli({**remote, "AGENTS_CELERY_API_URL": api.url}, "show", run_id, "--json")
    assert json.loads(shown.stdout)["status"] == "completed"
    stopped = cli(remote, "stop", run_id, "--url", api.url)
    assert stopped.returncode == 2 and "RunFinishedError" in stopped.stderr  # 409 mapped back to the error


# -- for scripts and operators ----------------------------------------------------------------------------


def test_approve_answers_a_paused_run_without_a_prompt(worker: Any, worker_env: dict[str, str], script: Any) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/approve-a"})]), "Done.")
    started = cli(worker_env, "run", "fake", "delete it", "--json")  # NDJSON, no questions: stops at the pause
    assert started.returncode == 0, started.stderr
    events = [json.loads(line) for line in started.stdout.splitlines()]
    assert [e["offset"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"]["type"] == "interrupt"
    run_id = events[0]["run_id"]
    call_id = events[-1]["outcome"]["interrupts"][0]["tool_call_id"]
    shown = cli(worker_env, "show", run_id)
    assert "agents-celery approve" in shown.stdout  # paused: it says how to answer
    bad = cli(worker_env, "approve", run_id, "--args", "nope={}")
    assert bad.returncode == 2 and "not pending" in bad.stderr and "Traceback" not in bad.stderr
    answered = cli(worker_env, "approve", run_id, "--args", f'{call_id}={{"path": "/tmp/approve-b"}}', "--json")
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout)["run_id"] == run_id
    tail = cli(worker_env, "tail", run_id, "--after", str(events[-1]["offset"]), "--json")
    results = [json.loads(line) for line in tail.stdout.splitlines() if '"TOOL_CALL_RESULT"' in line]
    assert results and results[0]["content"] == "deleted /tmp/approve-b"
    ended = cli(worker_env, "show", run_id)
    assert "completed" in ended.stdout and "approve" not in ended.stdout  # ended: no advice to answer it


def test_a_rejection_with_a_note(worker: Any, worker_env: dict[str, str], script: Any) -> None:
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/approve-c"})]), "Fine.")
    run_id = json.loads(cli(worker_env, "run", "fake", "delete it", "--json").stdout.splitlines()[0])["run_id"]
    answered = cli(worker_env, "approve", run_id, "--reject", "--note", "keep it")
    assert answered.returncode == 0 and "rejected 1 call(s)" in answered.stdout, answered.stderr
    tail = cli(worker_env, "tail", run_id, "--json")
    assert any('"TOOL_CALL_RESULT"' in line and "keep it" in line for line in tail.stdout.splitlines())


def test_version_bad_offsets_and_a_closed_pipe(worker: Any, worker_env: dict[str, str], runtime: Runtime) -> None:
    from agents_celery import __version__

    version = cli(worker_env, "--version")
    assert version.returncode == 0 and version.stdout.strip() == f"agents-celery {__version__}"
    view = runtime.run("offline", "What time is it?", timeout=30)
    negative = cli(worker_env, "tail", view.run_id, "--after", "-5")
    assert negative.returncode == 2 and "ValidationError" in negative.stderr and "Traceback" not in negative.stderr
    # A reader that went away (`| head -0`): the first write fails; no traceback, the command just ends.
    proc = subprocess.Popen(
        [*CLI, "tail", view.run_id, "--json"], env=worker_env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    assert proc.wait(timeout=30) == 1
    error = proc.stderr.read()
    proc.stderr.close()
    assert b"Traceback" not in error and b"BrokenPipe" not in error, error


def test_worker_log_lines_carry_their_run_prefix_once(worker: Any, runtime: Runtime) -> None:
    view = runtime.run("offline", "What time is it?", timeout=30)
    lines = [x for x in worker.log.read_text(errors="replace").splitlines() if f"run={view.run_id}" in x]
    assert lines and all(x.count("run=") == 1 for x in lines), lines


def test_runs_and_sessions_list_through_redis_and_over_http(
    apis: Any, worker_env: dict[str, str], runtime: Runtime, script: Any
) -> None:
    session = f"cli-{uuid.uuid4().hex[:8]}"
    script(ScriptedTurn("", [ScriptedToolCall("delete_file", {"path": "/tmp/cli-list"})]), "ok")
    paused = runtime.run("fake", "delete it", session_id=session, user_id="cli-user", timeout=30)
    assert paused.status == "paused"
    listed = cli(worker_env, "runs", "--status", "paused", "--session", session)
    assert listed.returncode == 0, listed.stderr
    assert paused.run_id in listed.stdout and "waits for: delete_file" in listed.stdout
    as_json = cli(worker_env, "runs", "--user", "cli-user", "--json")
    assert [json.loads(line)["run_id"] for line in as_json.stdout.splitlines()] == [paused.run_id]
    sessions = cli(worker_env, "sessions", "--user", "cli-user")
    assert session in sessions.stdout and f"active run {paused.run_id}" in sessions.stdout
    bad = cli(worker_env, "runs", "--status", "finished")
    assert bad.returncode == 2 and "status must be one of" in bad.stderr
    api = apis.get("flask")
    try:
        remote = {**worker_env, "AGENTS_CELERY_REDIS_URL": "redis://127.0.0.1:9/0"}  # no Redis: HTTP only
        over_http = cli(remote, "runs", "--session", session, "--json", "--url", api.url)
        assert [json.loads(line)["status"] for line in over_http.stdout.splitlines()] == ["paused"], over_http.stderr
        bad = cli(remote, "runs", "--limit", "0", "--url", api.url)
        assert bad.returncode == 2 and "limit" in bad.stderr
    finally:
        runtime.stop(paused.run_id)


def test_show_a_run_tree(worker: Any, worker_env: dict[str, str], fake_openai: Any, runtime: Runtime) -> None:
    from .test_subagents import by_agent, lead_asks, researcher_counts

    fake_openai.responder = by_agent(lead=lead_asks("cli"), researcher=researcher_counts())
    view = runtime.run("lead", "research", timeout=30)
    (child,) = view.children
    shown = cli(worker_env, "show", view.run_id)
    assert shown.returncode == 0, shown.stderr
    assert f"child:    {child['run_id']} researcher completed" in shown.stdout
    assert f"parent:   {view.run_id}" in cli(worker_env, "show", child["run_id"]).stdout


# -- the prompt, without a worker -------------------------------------------------------------------------


def test_the_prompt_asks_each_pending_call_until_it_gets_an_answer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """y approves, n rejects with a note, e edits the arguments (asked again until they are a JSON object), any
    other answer is asked again; the end of input leaves every call undecided."""
    import io

    from agents_celery.cli.live import ask_decisions
    from agents_celery.cli.render import Printer
    from agents_celery.runs import ToolCall

    calls = [ToolCall(id=f"c{i}", name="delete_file", arguments='{"path": "/tmp/x"}') for i in range(3)]
    answers = 'maybe\ny\nn\ntoo risky\ne\nnot json\n[1]\n{"path": "/tmp/y"}\n'
    monkeypatch.setattr("sys.stdin", io.StringIO(answers))
    assert ask_decisions(calls, Printer()) == [
        {"tool_call_id": "c0", "confirmed": True},
        {"tool_call_id": "c1", "confirmed": False, "confirmation_note": "too risky"},
        {"tool_call_id": "c2", "confirmed": True, "tool_args": {"path": "/tmp/y"}},
    ]
    printed = capsys.readouterr().out
    assert printed.count("please answer y, n or e") == 1 and "not JSON" in printed and "a JSON object" in printed
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert ask_decisions(calls, Printer()) is None  # the input ended at the second call


# -- without the [cli] extra; `agents-celery api` open by default? -------------------------------------------

#: The CLI in a fresh interpreter where rich cannot be imported, as with the core install alone.
NO_RICH = "import sys\nsys.modules['rich'] = None\nfrom agents_celery.cli import main\nsys.exit(main(sys.argv[1:]))"


def test_operator_commands_print_plain_text_without_rich(
    worker: Any, worker_env: dict[str, str], runtime: Runtime
) -> None:
    """rich comes with ``[cli]``; without it every command works (plain text), ``run``'s renderer included."""

    def plain(*args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-c", NO_RICH, *args], env=worker_env, cwd=ROOT, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert out.returncode == 0 and "rich" not in out.stderr, out.stdout + out.stderr
        return out.stdout

    view = runtime.run("offline", "What time is it?", timeout=30)
    assert "status:   completed" in plain("show", view.run_id)
    assert json.loads(plain("show", view.run_id, "--json"))["status"] == "completed"
    assert view.run_id in plain("runs", "--limit", "200")
    assert "It is 12:00 UTC." in plain("tail", view.run_id)
    assert json.loads(plain("tail", view.run_id, "--json").splitlines()[-1])["type"] == "RUN_FINISHED"
    followed = plain("run", "offline", "What time is it?")
    assert "It is 12:00 UTC." in followed and re.search(r"✓ run [0-9a-f]{32} completed", followed), followed


def test_the_demo_without_its_extra_names_the_extra() -> None:
    code = "import sys\nsys.modules['rich'] = None\nfrom agents_celery.cli import main\nsys.exit(main(['demo']))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "pip install 'agents-celery[demo]'" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("with_key", [False, True], ids=["open", "with-key"])
def test_api_listens_on_loopback_by_default_and_warns_when_open(worker_env: dict[str, str], with_key: bool) -> None:
    """``agents-celery api`` binds 127.0.0.1 unless told otherwise, and says so when anyone may approve calls."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in worker_env.items() if k not in ("AGENTS_CELERY_API_KEY", "AGENTS_CELERY_API_HOST")}
    env |= {"AGENTS_CELERY_API_KEY": "k" * 24} if with_key else {}
    proc = subprocess.Popen(
        [*CLI, "api", "--port", str(port)], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()

    def health() -> bool:
        assert proc.poll() is None, "".join(lines)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    try:
        wait_for(health, timeout=30, interval=0.05, what="agents-celery api answering /health")
        wait_for(lambda: any("Running on" in line for line in lines), timeout=10, what="the server's address line")
        output = "".join(lines)
        assert f"Running on http://127.0.0.1:{port}" in output and "all addresses" not in output, output
        warned = "no AGENTS_CELERY_API_KEY and no authorize hook" in output
        assert warned is not with_key, output
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        reader.join(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def test_an_app_with_an_authorize_hook_or_a_key_is_not_called_open(caplog: pytest.LogCaptureFixture) -> None:
    from flask import Flask

    from agents_celery.contrib.flask import close_app, create_app, init_app
    from agents_celery.settings import load_settings

    from .conftest import TEST_REDIS_URL

    open_settings = load_settings(redis_url=TEST_REDIS_URL)
    cases = [
        (lambda app: init_app(app, settings=open_settings), True),
        (lambda app: init_app(app, settings=open_settings, authorize=lambda *args: True), False),
        (lambda app: init_app(app, settings=open_settings.model_copy(update={"api_key": "k" * 24})), False),
    ]
    for setup, warned in cases:
        caplog.clear()
        app = Flask("host")
        with caplog.at_level(logging.WARNING, logger="agents_celery.contrib.flask"):
            setup(app)
        close_app(app)
        assert any("no authorize hook" in r.getMessage() for r in caplog.records) is warned
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agents_celery.contrib.flask"):
        close_app(create_app(settings=open_settings))
    assert any("no AGENTS_CELERY_API_KEY" in r.getMessage() for r in caplog.records)
