"""The Django app config: where the app keeps its API (built on first use, one per process)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from django.apps import AppConfig, apps

from ...broker.extension import host_app
from ...http.protocol import API
from ...http.streams import MAX_CONNECTIONS, Streams, widen_pool
from ...runtime import Runtime
from ...settings import FRONT_END_KEYS, Settings, settings_from
from ...storage.connections import connect_async
from ...storage.eventlog import AsyncEventLog


class AgentsCeleryConfig(AppConfig):  # type: ignore[misc]  # Django has no type hints here
    name = "agents_celery.contrib.django"
    label = "agents_celery"
    verbose_name = "Agent runs"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._logs: dict[int, AsyncEventLog] = {}

    @property
    def options(self) -> dict[str, Any]:
        """``settings.AGENTS_CELERY`` with upper-cased keys."""
        from django.conf import settings

        return {str(k).upper(): v for k, v in (getattr(settings, "AGENTS_CELERY", None) or {}).items()}

    @functools.cached_property
    def settings(self) -> Settings:
        """agents-celery's settings: ``AGENTS_CELERY`` over the environment over the defaults."""
        host = {k: v for k, v in self.options.items() if k not in FRONT_END_KEYS}
        return settings_from(host, "settings.AGENTS_CELERY")

    def front_end(self, name: str, default: Any) -> Any:
        """A front-end key of ``AGENTS_CELERY`` (``ALLOW_ANONYMOUS``, ``KEEPALIVE_SECONDS`` ...)."""
        return self.options.get(name, default)

    @functools.cached_property
    def api(self) -> API:
        """The API of this process: a Runtime on the settings, and the stream client. The Runtime sends its steps
        through the project's Celery app (``proj/celery.py``'s, joined by ``configure(app)``), so through the
        project's ``CELERY_BROKER_URL``, unless agents-celery is given a broker of its own."""
        runtime = Runtime(settings=self.settings, celery_app=host_app(self.settings))
        size = int(self.front_end("API_REDIS_MAX_CONNECTIONS", MAX_CONNECTIONS))
        streams = Streams(runtime, size, float(self.front_end("IDLE_CLOSE_SECONDS", 30.0)))
        widen_pool(runtime, size)
        return API(
            runtime,
            streams,
            keepalive_seconds=float(self.front_end("KEEPALIVE_SECONDS", 15.0)),
            block_seconds=float(self.front_end("BLOCK_SECONDS", 600.0)),
        )

    def async_log(self) -> AsyncEventLog:
        """The asyncio event log of the running event loop (an asyncio Redis client belongs to its loop)."""
        loop = id(asyncio.get_running_loop())
        log = self._logs.get(loop)
        if log is None:
            size = int(self.front_end("API_REDIS_MAX_CONNECTIONS", MAX_CONNECTIONS))  # one per open stream
            client = connect_async(
                self.settings.redis_url, socket_connect_timeout=2, socket_timeout=10, max_connections=size
            )
            log = self._logs[loop] = AsyncEventLog(client, self.api.runtime.store.keys)
        return log


def config() -> AgentsCeleryConfig:
    """The installed app's config (RuntimeError when it is not in INSTALLED_APPS)."""
    found = apps.get_app_config("agents_celery")
    if not isinstance(found, AgentsCeleryConfig):
        raise RuntimeError("add 'agents_celery.contrib.django' to INSTALLED_APPS")
    return found
