"""Long sessions: prompt tokens per turn of a 200-turn session, with and without a history policy.

Two sessions of 200 runs each (one user message and one answer per run) on one real worker: ``long_plain`` (no
policy: every prompt carries the whole history) and ``long_summarize`` (``Summarize(max_prompt_tokens=2000,
keep_last_turns=4)``), both talking to an in-process FakeOpenAIServer through the openai SDK. The server answers
each turn with 40 words and each summary request with a 60-word summary. Figure: the prompt tokens the server
reports for each agent turn (its ``prompt_tokens``: the words of the prompt it received), the mean over the last
50 turns and the maximum; floor: the same without the policy, measured in the same run. The 200th prompt of the
plain session is what every prompt would grow to; the policy's stays under its budget.
"""

from __future__ import annotations

import time
from typing import Any

from agents_celery.history import is_summary_request
from agents_celery.models.scripted import word_count

from .agents import HISTORY_BUDGET
from .common import Row, agents_worker, cli_main, log, prefixed, runtime_for

ANSWER = " ".join(f"word{i}" for i in range(40))
SUMMARY = " ".join(f"fact{i}" for i in range(60))


def _server() -> Any:
    from agents_celery.testing.openai_server import FakeOpenAIServer, FakeReply, SummaryResponder

    return FakeOpenAIServer(SummaryResponder(lambda request: FakeReply(text=ANSWER), text=SUMMARY)).start()


def session(rt: Any, agent: str, turns: int) -> None:
    sid = f"{agent}-{time.time_ns()}"
    for i in range(turns):
        view = rt.run(agent, f"Question {i}: what should we look at next in the report?", session_id=sid, timeout=60)
        assert view.status.value == "completed", f"{agent} turn {i}: {view.status} {view.error}"


def prompts(requests: list[dict[str, Any]]) -> tuple[list[int], int]:
    """The prompt tokens (words) of the agent turns among ``requests``, and how many were summary requests."""
    turns = [word_count(r["messages"]) for r in requests if not is_summary_request(r)]
    return turns, sum(1 for r in requests if is_summary_request(r))


def run(quick: bool) -> list[Row]:
    turns = 100 if quick else 200
    server = _server()
    try:
        with prefixed("history") as prefix:
            queue = f"{prefix}-agents"
            worker = agents_worker(prefix, queue, f"{prefix}-hist", {"FAKE_OPENAI_URL": server.url})
            try:
                worker.wait_ready()
                rt = runtime_for(prefix, queue)
                try:
                    log(f"history: {turns}-turn session without a policy")
                    session(rt, "long_plain", turns)
                    plain, _ = prompts(server.requests)
                    seen = len(server.requests)
                    log(f"history: {turns}-turn session with Summarize(max_prompt_tokens={HISTORY_BUDGET})")
                    t0 = time.perf_counter()
                    session(rt, "long_summarize", turns)
                    took = time.perf_counter() - t0
                    policy, summaries = prompts(server.requests[seen:])
                finally:
                    rt.close()
            finally:
                worker.stop()
    finally:
        server.stop()
    tail = max(1, turns // 4)
    mean_plain, mean_policy = sum(plain[-tail:]) / tail, sum(policy[-tail:]) / tail
    log(
        f"history: turn {turns} prompt {plain[-1]} tokens without, {policy[-1]} with the policy; max with "
        f"{max(policy)} (budget {HISTORY_BUDGET}); {summaries} summary steps; {took:.1f} s for the session"
    )
    return [
        Row(f"prompt tokens per turn, last {tail} of {turns} turns, Summarize", mean_policy, "tokens",
            "same session, no policy", mean_plain, "<=", 0.5, readme=True),
        Row(f"largest prompt of the {turns} turns, Summarize (budget {HISTORY_BUDGET})", float(max(policy)), "tokens",
            "largest without a policy", float(max(plain)), "<=", None, target_abs=float(HISTORY_BUDGET)),
        Row(f"summary steps in {turns} turns (info)", float(summaries), "steps", "", None, "<=", None),
    ]  # fmt: skip


if __name__ == "__main__":
    cli_main(run)
