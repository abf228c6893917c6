"""The fake OpenAI-compatible server's command line (``python -m agents_celery.testing.openai_server``), driven
as a subprocess by the real openai SDK."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from .conftest import wait_for
from .support.workers import ROOT

MODULE = [sys.executable, "-m", "agents_celery.testing.openai_server"]


@contextlib.contextmanager
def serving(*args: str) -> Iterator[tuple[str, list[str]]]:
    """The server on a free port (``--port 0``) with ``args``: its URL and its output lines."""
    proc = subprocess.Popen(
        [*MODULE, "--port", "0", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        first = wait_for(lambda: lines or proc.poll() is not None, timeout=30, what="the server's first line")
        assert first is not True and lines[0].startswith("fake OpenAI server on http://127.0.0.1:"), lines
        yield lines[0].split(" on ", 1)[1].strip(), lines
    finally:
        proc.terminate()
        assert proc.wait(timeout=15) == 0  # SIGTERM is a clean stop
        reader.join(timeout=10)
        proc.stdout.close()


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    """The server answering 7 words 1 ms apart."""
    with serving("--tokens", "7", "--token-delay", "0.001") as found:
        yield found


def test_it_answers_the_openai_sdk_streamed_and_not(server: tuple[str, list[str]]) -> None:
    url, lines = server
    client = openai.OpenAI(base_url=url, api_key="anything")
    try:
        messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
        whole = client.chat.completions.create(model="fake-model", messages=messages)
        text = whole.choices[0].message.content or ""
        assert len(text.split()) == 7 and text.endswith(".")
        stream = client.chat.completions.create(model="fake-model", messages=messages, stream=True)
        pieces = [
            chunk.choices[0].delta.content for chunk in stream if chunk.choices and chunk.choices[0].delta.content
        ]
        assert len(pieces) == 7 and "".join(pieces) == text
        assert [m.id for m in client.models.list()] == ["fake-model"]
    finally:
        client.close()
    assert len(lines) == 1, lines  # no warning, no request log


def test_help_has_no_runtime_warning() -> None:
    out = subprocess.run([*MODULE, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--tokens" in out.stdout and "--port" in out.stdout
    assert out.stderr == "", out.stderr  # runpy's "found in sys.modules" RuntimeWarning is gone


def test_tool_calls_are_scripted_from_the_command_line() -> None:
    calls = ["--tool-call", 'get_time={"tz": "UTC"}', "--tool-call", "ping={}"]
    with serving("--text", "It is noon.", *calls) as (url, _):
        client = openai.OpenAI(base_url=url, api_key="anything")
        try:
            messages: list[Any] = [{"role": "user", "content": "time?"}]
            first = client.chat.completions.create(model="m", messages=messages).choices[0].message
            got = [(c.function.name, json.loads(c.function.arguments)) for c in first.tool_calls or []]  # type: ignore[union-attr]
            assert got == [("get_time", {"tz": "UTC"}), ("ping", {})] and not first.content
            messages.append(first.model_dump(exclude_none=True))
            messages += [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in first.tool_calls or []]
            after = client.chat.completions.create(model="m", messages=messages).choices[0].message
            assert after.content == "It is noon." and not after.tool_calls
        finally:
            client.close()
    bad = subprocess.run([*MODULE, "--tool-call", "get_time=[1]"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "JSON object of arguments" in bad.stderr


def test_held_streams_wait_for_their_release() -> None:
    """``--held``: a stream sends nothing after its headers until ``POST /release``; streams then flow."""
    import httpx

    from agents_celery.testing.openai_server import release

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with serving("--tokens", "3", "--held") as (url, _), httpx.Client(timeout=httpx.Timeout(30, read=0.5)) as client:
        with client.stream("POST", f"{url}/chat/completions", json=body) as held:
            assert held.status_code == 200
            with pytest.raises(httpx.ReadTimeout):  # half a second with no chunk: held
                next(held.iter_raw())
        release(url)
        text = client.post(f"{url}/chat/completions", json=body).text
        chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
        words = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
        assert len([w for w in words if w]) == 3 and text.rstrip().endswith("data: [DONE]"), text
