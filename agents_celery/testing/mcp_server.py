"""The MCP server of tests/test_mcp.py and bench/mcp.py: the ``mcp`` package's own server, over streamable HTTP
(``python -m agents_celery.testing.mcp_server http PORT``, served by uvicorn) or stdio (``... stdio``). Needs the
``mcp`` extra.

It counts in Redis (``MCP_TEST_REDIS``, keys under ``MCP_TEST_PREFIX``, as ``tests/support/invariants.py:counter_of``
reads them): ``<p>:test:count:<key>`` per execution of ``count``/``slow_count``/``delete``/``hang``,
``<p>:test:count:tools_list`` per ``tools/list`` request; and it keeps each call's ``_meta`` (and which client
session sent it) in the list ``<p>:test:mcp:meta``.

``grow`` changes the tool list at run time: it adds a tool ``added_<key>`` (counting under ``added:<key>``) and
announces it with ``notifications/tools/list_changed`` on the calling request's stream, so the client has the
notification before the call's result (``standalone=true``: on the session's standalone GET stream instead, which
a client reads on its own schedule).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import mcp_types
import redis
from mcp.server.mcpserver import Context, MCPServer

_redis = redis.Redis.from_url(os.environ.get("MCP_TEST_REDIS", "redis://127.0.0.1:6379/9"))
PREFIX = os.environ.get("MCP_TEST_PREFIX", "mcptest")


def bump(key: str) -> int:
    return int(_redis.incr(f"{PREFIX}:test:count:{key}"))


def keep_meta(ctx: Context, tool: str, args: dict[str, Any]) -> None:
    meta = ctx.request_context.meta
    found = dict(meta or {})  # a TypedDict: the request's ``_meta`` as the client sent it
    session = (ctx.headers or {}).get("mcp-session-id", "")  # the client's session (stdio: none)
    record = {"tool": tool, "args": args, "meta": found, "session": session}
    _redis.rpush(f"{PREFIX}:test:mcp:meta", json.dumps(record, default=str))


class CountingServer(MCPServer):
    async def list_tools(self) -> Any:
        bump("tools_list")
        return await super().list_tools()


server = CountingServer("agents-celery-tests")


@server.tool()
def count(key: str, ctx: Context) -> str:
    """Count one execution under key."""
    keep_meta(ctx, "count", {"key": key})
    return f"count {key}: {bump(key)}"


@server.tool()
async def slow_count(key: str, seconds: float, ctx: Context) -> str:
    """Count one execution under key, then take seconds to answer."""
    keep_meta(ctx, "slow_count", {"key": key, "seconds": seconds})
    n = bump(key)
    await asyncio.sleep(seconds)
    return f"slow count {key}: {n}"


@server.tool()
async def slow_once(key: str, seconds: float, ctx: Context) -> str:
    """Count one execution under key; the first one also takes seconds to answer (and notes this server's pid
    under ``<p>:test:mcp:pid:<key>``, so a test can kill it meanwhile)."""
    keep_meta(ctx, "slow_once", {"key": key, "seconds": seconds})
    n = bump(key)
    if n == 1:
        _redis.set(f"{PREFIX}:test:mcp:pid:{key}", os.getpid(), ex=600)
        await asyncio.sleep(seconds)
    return f"slow once {key}: {n}"


@server.tool()
def delete(path: str, ctx: Context) -> str:
    """Delete a file (the agent asks for a confirmation first)."""
    keep_meta(ctx, "delete", {"path": path})
    bump(f"delete:{path}")
    return f"deleted {path}"


@server.tool()
async def hang(key: str) -> str:
    """Never answer."""
    bump(key)
    await asyncio.sleep(3600)
    return "woke"


@server.tool()
def fails(key: str) -> str:
    """Always fail."""
    raise ValueError(f"no such thing as {key}")


@server.tool()
async def grow(key: str, ctx: Context, standalone: bool = False) -> str:
    """Add the tool added_<key> to this server's tool list and say that the list changed."""
    keep_meta(ctx, "grow", {"key": key, "standalone": standalone})
    bump(f"grow:{key}")

    def added(note: str = "") -> str:
        return f"added {key}: {bump(f'added:{key}')}"

    server.add_tool(added, name=f"added_{key}", description=f"A tool grow added for {key}.")
    related = None if standalone else ctx.request_id
    await ctx.session.send_notification(mcp_types.ToolListChangedNotification(), related_request_id=related)
    return f"grew added_{key}"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
