"""MCP tools: the tools of a Model Context Protocol server, as tools of an agent.

::

    files = MCPTools(url="http://files:8000/mcp", headers={"Authorization": "Bearer ..."}, prefix="files_",
                     requires_confirmation=["delete"], idempotent=["read"], timeout=30)
    git = MCPTools(command=["uvx", "mcp-server-git"], env={"GIT_DIR": "/srv/repo"})
    assistant = Agent(name="assistant", model=..., tools=[get_time, files, git])

A toolset's tool list is fetched once per run, by the run's first model turn, and recorded in the run's state
(``RunState.toolsets``): every later step of the run, on any worker, offers and calls the same tools. It is
fetched again when the server says its list changed (``notifications/tools/list_changed``) or when it is older
than ``list_ttl`` seconds, never before every model request. Each call is a tool call like any other: the
effect ledger, confirmations, edited arguments, stop, per-tool timeouts; its idempotency key
(``run_id:tool_call_id``) goes to the server as ``_meta.idempotency_key``.

A server that is down, or whose connection dies during a call, gives the model an error result, never a failed
run: one that could not be reached did not run the call; one lost during the call may have run it, so the call
is sent again (once, on a new session) only when the tool is declared idempotent.

Importing this package does not import the ``mcp`` SDK; the first connection does (:mod:`.connections`, extra
``agents-celery[mcp]``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jsonschema

from ..errors import ConfigurationError, MCPToolError, MCPUnavailable, ToolArgumentsError
from ..tools import Tool, ToolContext

if TYPE_CHECKING:
    from .connections import Target

__all__ = ["MCPTool", "MCPTools", "exposed_name"]

_INVALID = re.compile(r"[^a-zA-Z0-9_-]")
#: How long a tool list stays fresh by default (seconds).
LIST_TTL = 300.0
#: How long a ``tools/list`` may take (seconds).
LIST_TIMEOUT = 15.0


class MCPTools:
    """The tools of one MCP server, over streamable HTTP (``url``) or stdio (``command``).

    Args:
        url: The server's streamable HTTP endpoint, e.g. ``http://host:8000/mcp``.
        headers: HTTP headers sent with every request (``url`` only), e.g. an ``Authorization`` header.
        command: The program and arguments that start a stdio server (one per worker process, kept running).
        env: Environment variables for the stdio server, added to the ``mcp`` package's safe default set.
        prefix: Put in front of each tool's name as the model sees it (``prefix + name``), to keep two servers'
            tools apart. Characters OpenAI refuses in a name become ``_``.
        requires_confirmation: The server's tool names (without the prefix) whose calls wait for a human
            decision, or True for all of them.
        idempotent: Tool names that may safely run again after a crash or a lost connection.
        timeout: Seconds a call may take (None: ``AGENTS_CELERY_TOOL_TIMEOUT_SECONDS``).
        name: The toolset's name in the run state and the manifest (default: ``prefix`` without its trailing
            ``_``, else the server's host or the command's program).
        list_ttl: Seconds a run keeps a fetched tool list before fetching it again at its next model turn.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        prefix: str = "",
        requires_confirmation: Iterable[str] | bool = (),
        idempotent: Iterable[str] = (),
        timeout: float | None = None,
        name: str | None = None,
        list_ttl: float = LIST_TTL,
    ) -> None:
        if (url is None) == (not command):
            raise ConfigurationError("MCPTools needs either url=... (streamable HTTP) or command=[...] (stdio)")
        if isinstance(command, str):
            raise ConfigurationError("MCPTools command must be a list: the program, then its arguments")
        if url is not None and not re.match(r"^https?://", url):
            raise ConfigurationError(f"MCPTools url {url!r} must start with http:// or https://")
        if headers and url is None:
            raise ConfigurationError("MCPTools headers=... go with url=...; a stdio server takes env=...")
        if timeout is not None and not timeout > 0:
            raise ConfigurationError(f"MCPTools timeout must be a positive number of seconds, got {timeout!r}")
        if not list_ttl > 0:
            raise ConfigurationError(f"MCPTools list_ttl must be a positive number of seconds, got {list_ttl!r}")
        self.url = url
        self.headers = dict(headers or {})
        self.command = list(command or [])
        self.env = dict(env) if env is not None else None
        self.prefix = prefix
        self.confirm_all = requires_confirmation is True
        self.requires_confirmation = (
            frozenset() if isinstance(requires_confirmation, bool) else frozenset(requires_confirmation)
        )
        self.idempotent = frozenset(idempotent)
        self.timeout = timeout
        self.list_ttl = list_ttl
        self.name = name or _default_name(prefix, url, self.command)
        #: The tools the last listing in this process served (the manifest shows them), and when (ms).
        self.served: list[dict[str, Any]] = []
        self.listed_at: int | None = None
        #: When (ms) the server last said its tool list changed, as this process heard it.
        self.changed_at = 0
        self._lock = threading.Lock()
        self._made: dict[tuple[str, str, str], MCPTool] = {}

    def __repr__(self) -> str:
        return f"MCPTools(name={self.name!r}, {'url' if self.url else 'command'}={self.url or self.command!r})"

    # -- where the server is ---------------------------------------------------------------------------

    def target(self) -> Target:
        from .connections import Target

        env = tuple(sorted(self.env.items())) if self.env is not None else None
        return Target(self.url, tuple(sorted(self.headers.items())), tuple(self.command), env)

    def _list_changed(self) -> None:
        self.changed_at = int(time.time() * 1000)

    # -- the tool list -----------------------------------------------------------------------------------

    def stale(self, listing: Mapping[str, Any], now_ms: int | None = None) -> bool:
        """Whether a run's recorded ``listing`` must be fetched again: older than ``list_ttl``, or the server said
        its list changed after it was fetched."""
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        at = int(listing.get("listed_at", 0))
        return now - at >= self.list_ttl * 1000 or self.changed_at > at

    def list_tools(self) -> dict[str, Any]:
        """Fetch the server's tool list (``tools/list``): the listing a run records.

        Raises:
            MCPUnavailable: the server could not be reached or did not answer.
        """
        from . import connections

        try:
            tools = connections.list_tools(self.target(), self._list_changed, LIST_TIMEOUT)
        except (connections.ServerUnreachable, connections.ConnectionLost, TimeoutError) as exc:
            raise MCPUnavailable(f"MCP server {self.name!r} did not list its tools: {exc}") from None
        except Exception as exc:  # an error answer from the server
            raise MCPUnavailable(
                f"MCP server {self.name!r} did not list its tools: {type(exc).__name__}: {exc}"
            ) from None
        at = int(time.time() * 1000)
        served = [self.tool(spec).manifest() for spec in tools]
        with self._lock:
            self.served, self.listed_at = served, at
        return {"listed_at": at, "tools": tools}

    def tool(self, spec: Mapping[str, Any]) -> MCPTool:
        """One tool of a listing, as the agent's tool (made once per process for each name, description and schema:
        every step of every run builds its view of the agent from its listing)."""
        schema = dict(spec.get("input_schema") or {})
        key = (str(spec["name"]), str(spec.get("description") or ""), json.dumps(schema, sort_keys=True))
        made = self._made.get(key)
        if made is None:
            made = MCPTool(self, key[0], key[1], schema)
            with self._lock:
                if len(self._made) > 1000:  # a server whose schemas keep changing: start again
                    self._made.clear()
                self._made[key] = made
        return made

    def tools(self, listing: Mapping[str, Any]) -> list[MCPTool]:
        return [self.tool(spec) for spec in listing.get("tools", [])]

    def manifest(self) -> dict[str, Any]:
        """What workers publish about the toolset: where it is and the tools it last served here."""
        with self._lock:
            served, at = list(self.served), self.listed_at
        where = {"url": self.url} if self.url else {"command": self.command}
        return {"name": self.name, "transport": "http" if self.url else "stdio", **where, "prefix": self.prefix,
                "tools": served, "listed_at": at}  # fmt: skip


class MCPTool(Tool):
    """One tool of an MCP server: validated against the server's input schema, called with ``tools/call``."""

    def __init__(self, toolset: MCPTools, remote_name: str, description: str, schema: dict[str, Any]) -> None:
        self.toolset = toolset
        self.remote_name = remote_name
        self.name = exposed_name(toolset.prefix, remote_name)
        self.description = description
        self.parameters = schema if schema.get("type") == "object" else {"type": "object", "properties": {}}
        self.requires_confirmation = toolset.confirm_all or remote_name in toolset.requires_confirmation
        self.idempotent = remote_name in toolset.idempotent
        self.timeout = toolset.timeout
        self.is_async = False
        self.fn = self._call
        self._validator: Any = None  # made on first use, then reused
        self.__doc__ = description
        self.__name__ = self.__qualname__ = self.name
        self.__module__ = __name__

    def __repr__(self) -> str:
        return f"MCPTool(name={self.name!r}, toolset={self.toolset.name!r})"

    def validate(self, arguments: dict[str, Any] | str) -> dict[str, Any]:
        data = self._decode(arguments)
        if self._validator is None:
            try:
                cls = jsonschema.validators.validator_for(self.parameters)
                cls.check_schema(self.parameters)
                self._validator = cls(self.parameters)
            except jsonschema.SchemaError:
                self._validator = False  # the server's schema is its own business; the server checks the arguments
        if self._validator:
            error = jsonschema.exceptions.best_match(self._validator.iter_errors(data))
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "arguments"
                raise ToolArgumentsError(f"tool {self.name!r}: {where}: {error.message}")
        return dict(data)

    def invoke(self, arguments: dict[str, Any] | str, context: ToolContext) -> str:
        return self._call(self.validate(arguments), context)

    async def ainvoke(self, arguments: dict[str, Any] | str, context: ToolContext) -> str:
        import asyncio

        return await asyncio.to_thread(self.invoke, arguments, context)

    def manifest(self) -> dict[str, Any]:
        return {**super().manifest(), "toolset": self.toolset.name, "mcp_name": self.remote_name}

    def _call(self, arguments: dict[str, Any], context: ToolContext) -> str:
        from . import connections

        toolset = self.toolset
        meta = {"idempotency_key": context.idempotency_key, "run_id": context.run_id, "attempt": context.attempt}
        # A little past the step's own deadline (the tool's timeout, else the settings'), so its walk-away speaks first.
        bound = context.timeout if context.timeout is not None else self.timeout
        limit = (bound if bound is not None else _DEFAULT_TIMEOUT) + 2
        tries = 2 if self.idempotent else 1
        for attempt in range(tries):
            try:
                text, is_error = connections.call_tool(
                    toolset.target(), toolset._list_changed, self.remote_name, arguments, meta, limit
                )
            except connections.ServerUnreachable as exc:
                raise MCPUnavailable(
                    f"MCP server {toolset.name!r} is unreachable; the tool did not run ({exc})"
                ) from None
            except TimeoutError as exc:
                raise MCPUnavailable(
                    f"MCP server {toolset.name!r} did not answer the call; it may or may not have run ({exc})"
                ) from None
            except connections.ConnectionLost as exc:
                if attempt + 1 < tries:
                    continue  # idempotent: once more, on a new session
                raise MCPUnavailable(
                    f"the connection to MCP server {toolset.name!r} was lost during the call; it may or may not have "
                    f"run ({exc})"
                ) from None
            if is_error:
                raise MCPToolError(text)
            return text
        raise AssertionError("unreachable")  # pragma: no cover


#: A call's bound outside a step (no ``ToolContext.timeout``) when the toolset sets none: the settings' default.
#: In a step the call takes the step's own bound (``AGENTS_CELERY_TOOL_TIMEOUT_SECONDS`` or the toolset's).
_DEFAULT_TIMEOUT = 300.0


def exposed_name(prefix: str, name: str) -> str:
    """The name the model calls an MCP tool by: ``prefix + name``, OpenAI's refused characters as ``_``."""
    return _INVALID.sub("_", prefix + name)[:64] or "_"


def _default_name(prefix: str, url: str | None, command: list[str]) -> str:
    if _INVALID.sub("_", prefix).strip("_-"):
        return _INVALID.sub("_", prefix).strip("_-")
    if url is not None:
        host = re.sub(r"^https?://", "", url).split("/")[0]
        return _INVALID.sub("_", host)
    return _INVALID.sub("_", command[-1].rsplit("/", 1)[-1]) if command else "mcp"
