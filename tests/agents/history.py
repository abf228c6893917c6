"""The agents module of the long-session tests (``AGENTS_CELERY_AGENTS=tests.agents.history``): agents with a
history policy, talking to the tests' FakeOpenAIServer (``FAKE_OPENAI_URL``) through the real openai SDK."""

from __future__ import annotations

import os

from agents_celery import Agent, LastTurns, OpenAIChat, Summarize

#: The prompt budget of ``summarizing`` (tests check every prompt the fake server received against it).
BUDGET = int(os.environ.get("HISTORY_TEST_BUDGET", "400"))
#: Turns ``summarizing`` keeps verbatim after its summary, and turns ``last_turns`` sends.
KEEP = 2


def _model() -> OpenAIChat:
    return OpenAIChat("fake-model", base_url=os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1"), api_key="k")


summarizing = Agent(
    name="summarizing",
    instructions="Answer briefly.",
    model=_model(),
    history=Summarize(max_prompt_tokens=BUDGET, keep_last_turns=KEEP),
    description="Summarises its older history past a prompt budget.",
)

last_turns = Agent(
    name="last_turns",
    instructions="Answer briefly.",
    model=_model(),
    history=LastTurns(KEEP),
    description="Sends only its last turns.",
)

everything = Agent(name="everything", instructions="Answer briefly.", model=_model(), description="No policy.")
