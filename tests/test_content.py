"""Images and files in a user message: checked, stored once beside the run, sent to the model as content parts.

Real worker, real Redis, the real openai SDK against the local fake server (whose recorded requests show what the
model got)."""

from __future__ import annotations

import base64
import json
import re
import uuid
from typing import Any

import pytest
import redis

from agents_celery import Runtime
from agents_celery.content import check_parts, refs_in, resolved, stored_form
from agents_celery.errors import InputTooLargeError, PayloadTooLargeError, ValidationError
from agents_celery.events import EventType
from agents_celery.models import ScriptedToolCall, ScriptedTurn
from agents_celery.settings import Settings
from agents_celery.testing.openai_server import ScriptResponder

from .support.invariants import assert_run_sound

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8  # 2 KiB standing in for an image
PDF = b"%PDF-1.4\n" + b"0123456789abcdef" * 256  # 4 KiB standing in for a document
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
PDF_URL = "data:application/pdf;base64," + base64.b64encode(PDF).decode()
WEB_IMAGE = "https://example.com/cat.jpg"


def parts(text: str = "What is in these?") -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": text},
        {"type": "image_url", "image_url": {"url": WEB_IMAGE}},
        {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "low"}},
        {"type": "file", "file": {"filename": "report.pdf", "file_data": PDF_URL}},
    ]


def user_parts(request: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The content-part lists of the user messages of a request the fake server received."""
    return [m["content"] for m in request["messages"] if m["role"] == "user" and isinstance(m["content"], list)]


def prefix_keys(r: redis.Redis, prefix: str) -> set[bytes]:
    """The deployment's keys but the sweeper's lock (which comes and goes with the workers' sweeps)."""
    return {k for k in r.scan_iter(f"{prefix}:*", count=1000) if k != f"{prefix}:sweeper".encode()}


def _tag(key: bytes) -> bytes | None:
    found = re.search(rb"\{([^}]*)\}", key)
    return found.group(1) if found else None


def keys_added(r: redis.Redis, prefix: str, before: set[bytes]) -> set[bytes]:
    """The keys of a run or session (hash-tagged) that were not there ``before`` and belong to none that was. The
    shared worker may meanwhile go on with other tests' runs: one takes or gives up its lease, or ends (``gone``)."""
    known = {_tag(key) for key in before}
    return {key for key in prefix_keys(r, prefix) - before if _tag(key) is not None and _tag(key) not in known}


# -- the checks, no Redis ----------------------------------------------------------------------------------------


def test_parts_are_checked_and_measured() -> None:
    settings = Settings()
    checked = check_parts(parts(), settings)
    assert checked.sizes == [0, len(WEB_IMAGE), len(PNG), len(PDF)]
    assert check_parts("plain text", settings).parts is None
    for bad, words in [
        ([], "non-empty"),
        ([{"type": "audio"}], "'audio'"),
        ([{"type": "image_url", "image_url": {"url": "ftp://x"}}], r"http\(s\)"),
        ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}], "invalid base64"),
        ([{"type": "image_url", "image_url": {"url": PDF_URL}}], r"one of \['image/png'.*'application/pdf'"),
        ([{"type": "image_url", "image_url": {"url": "data:image/svg+xml;base64,PHN2Zy8+"}}], "'image/svg"),
        ([{"type": "file", "file": {"filename": "a.pdf"}}], "file_data"),
        ([{"type": "text", "text": "  "}], "blank"),
        ([{"type": "text", "text": "hi", "ref": "another-run/0"}], "'ref'"),  # no reading another run's parts
    ]:
        with pytest.raises(ValidationError, match=words):
            check_parts(bad, settings)


def test_limits_per_part_and_per_run() -> None:
    settings = Settings(max_part_bytes=len(PDF) - 1, max_input_bytes=10_000)
    with pytest.raises(InputTooLargeError, match="message part 3") as exc:
        check_parts(parts(), settings)
    assert (exc.value.status, exc.value.code) == (413, "input_too_large")
    roomy = Settings(max_part_bytes=len(PDF), max_input_bytes=len(PDF) + len(PNG))
    with pytest.raises(InputTooLargeError, match="per run"):
        check_parts(parts(), roomy)
    with pytest.raises(PayloadTooLargeError, match="characters"):
        check_parts([{"type": "text", "text": "x" * 11}], Settings(max_message_chars=10))


def test_stored_form_keeps_references_and_resolves_back() -> None:
    content, stored = stored_form(check_parts(parts(), Settings()), "run1")
    assert list(stored) == ["run1/0", "run1/1"]
    assert PNG_URL not in json.dumps(content) and PDF_URL not in json.dumps(content)
    assert content[1] == {"type": "image_url", "image_url": {"url": WEB_IMAGE}}  # small: stays inline
    assert content[3] == {
        "type": "file",
        "ref": "run1/1",
        "media_type": "application/pdf",
        "bytes": len(PDF),
        "filename": "report.pdf",
    }
    messages = [{"role": "user", "content": content}]
    assert refs_in(messages) == ["run1/0", "run1/1"]
    back = resolved(messages, {ref: json.loads(v) for ref, v in stored.items()})
    assert back == [{"role": "user", "content": parts()}]
    gone = resolved(messages, {})[0]["content"]
    assert gone[3] == {"type": "text", "text": "[report.pdf: no longer kept]"}


# -- end to end ----------------------------------------------------------------------------------------------


def test_the_model_gets_the_parts(runtime: Runtime, script: Any, fake_openai: Any) -> None:
    script("A cat and a report.")
    seen = len(fake_openai.requests)
    stream = runtime.stream("fake", parts())
    view = runtime.run("fake", parts("again"))  # Runtime.run takes parts too
    assert view.status == "completed"
    assert_run_sound(list(stream.events()))
    assert runtime.get(stream.id).status == "completed"
    requests = fake_openai.requests[seen:]
    assert len(requests) == 2
    got = sorted((user_parts(q) for q in requests), key=lambda p: p[0][0]["text"])  # the runs ran side by side
    assert got == [[parts()], [parts("again")]]  # image URL, data URL and PDF exactly as given


def test_parts_are_stored_once_not_in_each_checkpoint(
    runtime: Runtime, script: Any, fake_openai: Any, r: redis.Redis
) -> None:
    # three model turns and two tool steps: five checkpoints
    script(
        ScriptedTurn("", [ScriptedToolCall("add", {"a": 1, "b": 2})]),
        ScriptedTurn("", [ScriptedToolCall("add", {"a": 3, "b": 4})]),
        "Done.",
    )
    seen = len(fake_openai.requests)
    stream = runtime.stream("fake", parts())
    events = list(stream.events())
    assert_run_sound(events)
    assert runtime.get(stream.id).status == "completed"
    requests = fake_openai.requests[seen:]
    assert len(requests) == 3 and all(user_parts(q) == [parts()] for q in requests)  # every turn sends them
    assert sum(e.type is EventType.STEP_FINISHED for e in events) == 5
    k = runtime.store.keys.run(stream.id)
    png, pdf = base64.b64encode(PNG), base64.b64encode(PDF)
    state = r.hget(k.run, "state") or b""
    conversation = b"".join(r.lrange(k.messages, 0, -1))
    assert png not in state and png not in conversation and pdf not in conversation
    assert len(state) + len(conversation) < len(png)  # what a step loads and commits is small
    # the data is held once, in the run's record, and nowhere else of the run's keys
    holders = [key for key in prefix_keys(r, runtime.settings.key_prefix) if stream.id.encode() in key]
    found = {key: _count(r, key, png) for key in holders}
    assert {key: n for key, n in found.items() if n} == {k.run.encode(): 1}
    assert r.pttl(k.run) > 0  # expires with the run


def _count(r: redis.Redis, key: bytes, needle: bytes) -> int:
    kind = r.type(key)
    if kind == b"hash":
        return sum(v.count(needle) for v in r.hvals(key))
    if kind == b"list":
        return sum(v.count(needle) for v in r.lrange(key, 0, -1))
    if kind == b"string":
        return (r.get(key) or b"").count(needle)
    if kind == b"stream":
        return sum(v.count(needle) for _, fields in r.xrange(key) for v in fields.values())
    return 0


def test_oversized_input_creates_nothing(fast_settings: Settings, worker: Any, r: redis.Redis) -> None:
    for limits in ({"max_part_bytes": len(PNG) - 1}, {"max_input_bytes": len(PNG) + len(PDF) - 1}):
        rt = Runtime(settings=fast_settings.model_copy(update=limits))
        try:
            before = prefix_keys(r, fast_settings.key_prefix)
            runs = r.zcard(rt.store.keys.runs)
            with pytest.raises(InputTooLargeError) as exc:
                rt.stream("fake", parts(), session_id="s-too-large", idempotency_key="too-large")
            assert exc.value.status == 413
            assert keys_added(r, fast_settings.key_prefix, before) == set()  # no run, no session, no keys
            assert r.zcard(rt.store.keys.runs) == runs
        finally:
            rt.close()


def test_a_later_turn_of_the_session_still_sends_the_image(
    runtime: Runtime, script: Any, fake_openai: Any, r: redis.Redis
) -> None:
    script("A cat.")
    session = f"s-{runtime.store.keys.prefix}-{id(r)}"
    first = runtime.run("fake", parts(), session_id=session)
    assert first.status == "completed"
    seen = len(fake_openai.requests)
    second = runtime.run("fake", "And the report, what does it say?", session_id=session)
    assert second.status == "completed"
    (request,) = fake_openai.requests[seen:]
    assert user_parts(request) == [parts()]  # the history's message, with its image and PDF
    sk = runtime.store.keys.session(session)
    assert r.pttl(sk.parts) >= r.pttl(sk.history) > 0  # kept as long as the history
    history = b"".join(r.lrange(sk.history, 0, -1))
    assert base64.b64encode(PNG) not in history  # the history holds references


def test_a_message_sent_to_a_live_run_may_carry_parts(
    fast_settings: Settings, worker: Any, script: Any, fake_openai: Any, r: redis.Redis
) -> None:
    from .conftest import wait_event, wait_for

    script(" ".join(f"w{i}" for i in range(30)), token_delay=0.02)
    rt = Runtime(settings=fast_settings.model_copy(update={"max_input_bytes": len(PNG) + len(PDF) + 100}))
    try:
        stream = rt.stream("fake", [{"type": "text", "text": "a long story"}, parts()[2]])  # text and the PNG
        wait_event(rt, stream.id, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT)
        with pytest.raises(InputTooLargeError, match="per run"):  # the PNG twice, and the PDF: over the run's limit
            rt.send_message(stream.id, parts())
        later = [{"type": "text", "text": "and this"}, parts()[3]]  # the PDF: within it
        assert rt.send_message(stream.id, later) == 1
        view = wait_for(lambda: (v := rt.get(stream.id)).status.is_final and v, timeout=30, what="the run to end")
        assert view.status == "completed"
        log = list(stream.events(until_pause=False))
        assert_run_sound(log)
        shown = [e.data["delta"] for e in log if e.type is EventType.TEXT_MESSAGE_CONTENT and e.data["delta"]]
        assert "and this [file report.pdf]" in shown  # the log's user message names the file
        request = fake_openai.requests[-1]
        assert user_parts(request) == [[{"type": "text", "text": "a long story"}, parts()[2]], later]
        k = rt.store.keys.run(stream.id)
        # the refused message's two numbers are skipped, nothing of it kept
        assert [r.hexists(k.run, f"part:{n}") for n in range(4)] == [True, False, False, True]
        assert base64.b64encode(PDF) not in b"".join(r.lrange(k.inbox, 0, -1))  # the inbox holds references
    finally:
        rt.close()


def test_parts_on_a_redis_cluster(deploy: Any, redis_cluster: Any, fake_openai: Any) -> None:
    """On Redis Cluster the run's parts live on its record's master, the session's copy on the session's: a later
    run of the session (another slot) still sends the earlier image and PDF."""
    from .conftest import TEST_REDIS_URL

    on_cluster = deploy("rcparts", redis_url=redis_cluster.url, broker_url=TEST_REDIS_URL)
    on_cluster.start(1)
    rt = on_cluster.runtime
    fake_openai.responder = ScriptResponder(["Seen."])
    session = f"s-cluster-{uuid.uuid4().hex}"
    assert rt.run("fake", parts(), session_id=session, timeout=60).status == "completed"
    seen = len(fake_openai.requests)
    assert rt.run("fake", "and again?", session_id=session, timeout=60).status == "completed"
    (request,) = fake_openai.requests[seen:]
    assert user_parts(request) == [parts()]


@pytest.mark.slow
def test_a_kill_during_the_turn_retries_it_with_the_parts(
    deploy: Any, fake_openai: Any, r: redis.Redis, key_prefix: str
) -> None:
    """kill -9 of the worker streaming a turn of a run with an image and a PDF: the retried turn, on the other
    worker (whose cache is cold), sends them again from the run's record; the run is sound."""
    from .conftest import all_events, wait_event, wait_for

    cluster = deploy("content-crash", prefix=key_prefix)
    cluster.start(2)
    rt = cluster.runtime
    fake_openai.responder = ScriptResponder([" ".join(f"t{i}" for i in range(100))], token_delay=0.02)
    seen = len(fake_openai.requests)
    stream = rt.stream("fake", parts())
    wait_event(rt, stream.id, lambda e: e.type is EventType.TEXT_MESSAGE_CONTENT and e.offset > 10)
    pid = int(wait_for(lambda: r.get(f"{key_prefix}:test:pid:{stream.id}"), what="a worker to start the run"))
    cluster.by_pid(pid).kill()
    events = all_events(rt, stream.id)
    assert_run_sound(events)
    assert any(e.type is EventType.CUSTOM and e.data["name"] == "attempt_abandoned" for e in events)
    assert rt.get(stream.id).status == "completed"
    requests = fake_openai.requests[seen:]
    assert len(requests) == 2 and all(user_parts(q) == [parts()] for q in requests)  # the first try and the retry
