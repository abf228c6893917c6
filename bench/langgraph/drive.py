"""100 runs at once on a LangGraph dev server: runs/s and the time from each request to its first token.

``python drive.py URL N`` (in the venv that has ``langgraph-sdk``; see README.md here).
"""

import asyncio
import sys
import time

from langgraph_sdk import get_client


async def one(client, i, firsts):
    first = None
    t0 = time.perf_counter()
    stream = client.runs.stream(None, "agent", input={"message": f"go {i}", "answer": ""}, stream_mode="custom")
    async for part in stream:
        if first is None and part.event == "custom":
            first = time.perf_counter() - t0
    firsts.append(first)


async def main(url, n):
    client = get_client(url=url)
    t0 = time.perf_counter()
    await one(client, -1, [])
    alone = time.perf_counter() - t0
    t0, firsts = time.perf_counter(), []
    await asyncio.gather(*(one(client, i, firsts) for i in range(n)))
    took = time.perf_counter() - t0
    firsts.sort()
    median, p95 = firsts[len(firsts) // 2], firsts[int(len(firsts) * 0.95)]
    print(f"langgraph: one alone {alone:.2f}s; {n} at once: {took:.2f}s, {n / took:.1f} runs/s, ", end="")
    print(f"first token median {median:.2f}s p95 {p95:.2f}s")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
