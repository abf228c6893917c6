"""Run by tests/test_agno_workflows.py with the Python of the agno venv (scripts/ensure-agno): Agno's own client
against our server, and Agno's own Workflow (the reference: what AgentOS streams for the same shape).

    python workflows.py <fake openai url> <shape> <our base url> <workflow id>

prints one JSON object: ``reference`` (the events Agno's Workflow streams, each as a dict), ``events`` (those its
RemoteWorkflow received from us, streamed), ``output`` (the non-streamed ``WorkflowRunOutput`` it read, as a dict)
and ``config`` (``GET /workflows/<id>`` as it read it). ``shape`` is ``sequence`` (research agent, count function, write
agent: our research-count-write) or ``parallel`` (gather function; a parallel of two agents and a function; write
agent: our two-researchers).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agno.agent import Agent
from agno.models.openai import OpenAIChat
from agno.workflow import Parallel, Step, Workflow
from agno.workflow.remote import RemoteWorkflow
from agno.workflow.types import StepInput, StepOutput


def shape(name: str, model_url: str) -> Workflow:
    model = OpenAIChat(id="fake-model", base_url=model_url, api_key="k")

    def agent(agent_name: str) -> Agent:
        return Agent(name=agent_name, model=model)

    def count(step_input: StepInput) -> StepOutput:
        return StepOutput(content=f"{len(str(step_input.previous_step_content).split())} words")

    def gather(step_input: StepInput) -> StepOutput:
        return StepOutput(content=f"notes on {step_input.input}")

    def tally(step_input: StepInput) -> StepOutput:
        return StepOutput(content=f"tallied {step_input.input}")

    if name == "sequence":
        steps: list[Any] = [
            Step(name="research", agent=agent("wf-scout")),
            Step(name="count", executor=count),
            Step(name="write", agent=agent("wf-author")),
        ]
    else:
        steps = [
            Step(name="gather", executor=gather),
            Parallel(
                Step(name="scout", agent=agent("wf-scout")),
                Step(name="analyst", agent=agent("wf-analyst")),
                Step(name="tally", executor=tally),
                name="dig",
            ),
            Step(name="write", agent=agent("wf-author")),
        ]
    return Workflow(name=f"agno-{name}", steps=steps)


def as_dict(event: Any) -> dict[str, Any]:
    return json.loads(json.dumps(event.to_dict(), default=str))


async def both(model_url: str, name: str, base_url: str, workflow_id: str) -> dict[str, Any]:
    workflow = shape(name, model_url)
    reference = [as_dict(e) async for e in workflow.arun("reefs", stream=True, stream_events=True)]
    ours = RemoteWorkflow(base_url=base_url, workflow_id=workflow_id, timeout=60)
    events = [as_dict(e) async for e in ours.arun("reefs", stream=True)]
    output = await ours.arun("reefs", stream=False)
    config = await ours.get_workflow_config()
    return {"reference": reference, "events": events, "output": output.to_dict(), "config": config.model_dump()}


def main() -> None:
    print(json.dumps(asyncio.run(both(*sys.argv[1:5])), default=str))


if __name__ == "__main__":
    main()
