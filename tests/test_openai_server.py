"""The fake OpenAI-compatible server's command line (``python -m agents_celery.testing.openai_server``), driven
as a subprocess by the real openai SDK."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import openai
import pytest

from .cluster import ROOT
from .conftest import wait_for

MODULE = [sys.executable, "-m", "agents_celery.testing.openai_server"]


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    """The server on a free port (``--port 0``) answering 7 words 1 ms apart: its URL and its output lines."""
    proc = subprocess.Popen(
        [*MODULE, "--port", "0", "--tokens", "7", "--token-delay", "0.001"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
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
