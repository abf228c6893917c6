"""A one-node LangGraph graph: one streamed chat completion from the fake OpenAI server (as our fake agent)."""

import os
from typing import TypedDict

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from openai import AsyncOpenAI

client = AsyncOpenAI(base_url=os.environ["FAKE_OPENAI_URL"], api_key="k")


class State(TypedDict):
    message: str
    answer: str


async def model(state: State) -> dict:
    text = []
    write = get_stream_writer()
    stream = await client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": state["message"]}], stream=True
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
            write({"token": chunk.choices[0].delta.content})
    return {"answer": "".join(text)}


builder = StateGraph(State)
builder.add_node("model", model)
builder.add_edge(START, "model")
builder.add_edge("model", END)
graph = builder.compile()
