"""Runs and sessions as resources: the indexes behind ``Runtime.runs`` / ``sessions`` / ``session``, cursor pages
under concurrent writes, deletes, and how the indexes catch up after a crash or the end of retention. The
steps run in process (InlineRunner) against the real test Redis; the HTTP routes are in tests/test_api.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agents_celery import (
    Agent,
    RunLiveError,
    RunNotFoundError,
    ScriptedModel,
    ScriptedToolCall,
    ScriptedTurn,
    SessionBusyError,
    SessionNotFoundError,
    ValidationError,
    tool,
)
from agents_celery.engine.sweeper import sweep
from agents_celery.runtime.admission import DELETING
from agents_celery.settings import Settings
from agents_celery.testing import InlineRunner

pytestmark = pytest.mark.timeout(60)


@tool(requires_confirmation=True)
def send_mail(to: str) -> str:
    """Send a mail."""
    return f"sent to {to}"


def talker(name: str = "talker") -> Agent:
    return Agent(name=name, model=ScriptedModel(["Hello."] * 200))


def mailer() -> Agent:
    turns = [ScriptedTurn("", [ScriptedToolCall("send_mail", {"to": "bob"})]), "Sent."] * 20
    return Agent(name="mailer", model=ScriptedModel(turns), tools=[send_mail])


@pytest.fixture
def runner(settings: Settings) -> Iterator[InlineRunner]:
    with InlineRunner([talker(), talker("other"), mailer()], settings=settings) as r:
        yield r


def ids(page: Any) -> list[str]:
    return [r.run_id for r in page.runs]


def test_runs_are_listed_newest_first_by_every_filter(runner: InlineRunner) -> None:
    rt = runner.runtime
    a = runner.run("talker", "hi", user_id="ann", session_id="s1")
    b = runner.run("other", "hi", user_id="bob")
    c = runner.run("mailer", "mail bob", user_id="ann")
    d = runner.run("talker", "again", user_id="ann", session_id="s1")
    assert c.status == "paused" and d.status == "completed"
    assert ids(rt.runs()) == [d.run_id, c.run_id, b.run_id, a.run_id]
    assert ids(rt.runs(status="paused")) == [c.run_id]
    assert ids(rt.runs(status="completed")) == [d.run_id, b.run_id, a.run_id]
    assert ids(rt.runs(agent_id="talker")) == [d.run_id, a.run_id]
    assert ids(rt.runs(user_id="ann")) == [d.run_id, c.run_id, a.run_id]
    assert ids(rt.runs(session_id="s1")) == [d.run_id, a.run_id]
    assert ids(rt.runs(user_id="ann", status="completed", agent_id="talker")) == [d.run_id, a.run_id]
    assert ids(rt.runs(user_id="nobody")) == []
    listed = rt.runs(status="paused").runs[0]
    assert listed.pending[0].name == "send_mail" and listed.user_id == "ann" and listed.last_offset > 0
    # the same run as GET /runs/<id> shows it, but for the log's fingerprint (one more read per run: GET's own)
    assert listed.to_dict() == {**rt.get(c.run_id).to_dict(), "last_position": ""}
    # The status indexes follow the run: continue, then stop.
    runner.continue_run(c.run_id)
    assert rt.runs(status="paused").runs == [] and c.run_id in ids(rt.runs(status="completed"))
    e = runner.run("mailer", "mail bob")
    runner.stop(e.run_id)
    assert ids(rt.runs(status="cancelled")) == [e.run_id]


def test_cursor_pages_hold_still_while_runs_are_added(runner: InlineRunner) -> None:
    rt = runner.runtime
    first = [runner.run("talker", f"n{i}").run_id for i in range(23)][::-1]  # newest first
    page1 = rt.runs(limit=10)
    assert ids(page1) == first[:10] and page1.next_cursor
    newer = [runner.run("talker", f"late{i}").run_id for i in range(5)]  # written between two pages
    page2 = rt.runs(limit=10, cursor=page1.next_cursor)
    page3 = rt.runs(limit=10, cursor=page2.next_cursor)
    assert ids(page2) == first[10:20] and ids(page3) == first[20:] and page3.next_cursor is None
    assert set(newer).isdisjoint(ids(page2) + ids(page3))
    assert ids(rt.runs(limit=5)) == newer[::-1]  # and a fresh first page shows them
    # A filter that matches sparsely still pages to the end without repeating a run.
    seen, cursor = [], None
    while True:
        page = rt.runs(agent_id="talker", limit=7, cursor=cursor)
        seen += ids(page)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == newer[::-1] + first


def test_runs_created_in_the_same_millisecond_page_without_loss(runner: InlineRunner) -> None:
    """Entries with one score are ordered by member: a cursor between two of them loses neither."""
    index = runner.runtime.store.index
    key = runner.runtime.store.keys.runs_of("agent", "probe")
    runner.runtime.redis.zadd(key, {f"r{i:02d}": 1000 for i in range(7)} | {"z": 2000, "a": 500})
    walked, cursor = [], None
    for _ in range(20):
        batch = list(_take(index.walk(key, cursor), 3))
        if not batch:
            break
        walked += batch
        cursor = (batch[-1][1], batch[-1][0])
    assert [m for m, _ in walked] == ["z", *[f"r{i:02d}" for i in range(6, -1, -1)], "a"]


def _take(it: Any, n: int) -> Iterator[Any]:
    for i, item in enumerate(it):
        if i == n:
            return
        yield item


def test_bad_listing_parameters_are_refused(runner: InlineRunner) -> None:
    rt = runner.runtime
    runner.run("talker", "hi")
    with pytest.raises(ValidationError, match="status must be one of"):
        rt.runs(status="done")
    for limit in (0, 201, -1):
        with pytest.raises(ValidationError, match="limit must be"):
            rt.runs(limit=limit)
    with pytest.raises(ValidationError, match="cursor"):
        rt.runs(cursor="nonsense")
    assert len(rt.runs().runs) == 1  # nothing changed


def test_sessions_list_and_show_their_conversation(runner: InlineRunner) -> None:
    rt = runner.runtime
    runner.run("talker", "first", user_id="ann", session_id="chat-1")
    runner.run("talker", "second", user_id="ann", session_id="chat-1")
    runner.run("talker", "elsewhere", user_id="ann", session_id="chat-2")
    runner.run("talker", "bob's", user_id="bob", session_id="chat-3")
    assert [s.session_id for s in rt.sessions(user_id="ann").sessions] == ["chat-2", "chat-1"]
    assert [s.session_id for s in rt.sessions().sessions][:3] == ["chat-3", "chat-2", "chat-1"]
    view = rt.session("chat-1")
    assert [m["content"] for m in view.messages] == ["first", "Hello.", "second", "Hello."]
    assert len(view.runs) == 2 and view.active_run_id is None
    with pytest.raises(SessionNotFoundError):
        rt.session("no-such-session")
    page = rt.sessions(user_id="ann", limit=1)
    assert [s.session_id for s in page.sessions] == ["chat-2"]
    assert [s.session_id for s in rt.sessions(user_id="ann", limit=1, cursor=page.next_cursor).sessions] == ["chat-1"]


def test_delete_a_run_only_once_it_ended(runner: InlineRunner) -> None:
    rt = runner.runtime
    paused = runner.run("mailer", "mail bob", session_id="s")
    with pytest.raises(RunLiveError):
        rt.delete_run(paused.run_id)
    assert rt.get(paused.run_id).status == "paused"  # untouched
    runner.stop(paused.run_id)
    rt.delete_run(paused.run_id)
    with pytest.raises(RunNotFoundError):
        rt.get(paused.run_id)
    assert rt.runs().runs == [] and rt.runs(session_id="s").runs == []
    assert not list(rt.redis.scan_iter(match=f"{runner.settings.key_prefix}:run:{{{paused.run_id}}}*"))


def test_delete_a_session_is_refused_while_a_run_of_it_is_live(runner: InlineRunner) -> None:
    rt = runner.runtime
    runner.run("talker", "hi", session_id="s", user_id="ann")
    live = runner.run("mailer", "mail bob", session_id="s", user_id="ann")
    with pytest.raises(SessionBusyError, match=f"has a live run \\({live.run_id}\\)"):
        rt.delete_session("s")
    assert len(rt.session("s").runs) == 2  # nothing deleted
    runner.stop(live.run_id)
    rt.store.sessions.take("s", DELETING, None)  # another request deleting it
    with pytest.raises(SessionBusyError, match="is being deleted"):
        rt.delete_session("s")
    assert len(rt.session("s").runs) == 2
    rt.store.sessions.release("s", DELETING)
    rt.delete_session("s")
    with pytest.raises(SessionNotFoundError):
        rt.session("s")
    assert rt.runs().runs == [] and rt.sessions(user_id="ann").sessions == []
    assert runner.run("talker", "a new start", session_id="s").status == "completed"  # the id is free again
    assert [m["content"] for m in rt.session("s").messages] == ["a new start", "Hello."]


def test_the_sweeper_puts_the_indexes_right_after_a_crash_and_at_the_end_of_retention(runner: InlineRunner) -> None:
    rt = runner.runtime
    store = rt.store
    done = runner.run("talker", "hi")
    # A worker died between the commit that ended the run and its index write: the run is still "live" there.
    with rt.redis.pipeline() as pipe:
        pipe.zrem(store.keys.runs_status("completed"), done.run_id)
        pipe.zadd(store.keys.runs_status("live"), {done.run_id: done.created_at})
        pipe.zadd(store.keys.live, {done.run_id: 0})
        pipe.execute()
    assert rt.runs(status="completed").runs == []  # the listing checks the real status: no wrong answer
    assert rt.runs(status="running").runs == []
    sweep(store, lambda *a: None)
    assert ids(rt.runs(status="completed")) == [done.run_id]
    # Retention over: the sweeper takes the run out of every index.
    later = int(done.created_at + store.settings.retention_ms + store.settings.tombstone_ms + 60_000)
    assert store.index.expire_due(later) == 1
    for key in (store.keys.runs, store.keys.runs_of("agent", "talker"), store.keys.runs_status("completed")):
        assert rt.redis.zscore(key, done.run_id) is None
