"""Settings read from the environment (``AGENTS_CELERY_*`` and ``CELERY_BROKER_URL``).

Every value has a default that works on one machine. A bad value fails at start-up with a
:class:`~agents_celery.errors.ConfigurationError` naming the variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import pydantic
from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import ConfigurationError
from .webhook import WebhookAllow

#: Keys of a host's settings dict that the web front ends read themselves (not :class:`Settings` fields).
FRONT_END_KEYS = frozenset(
    {
        "ALLOW_ANONYMOUS",
        "AUTHORIZE",
        "KEEPALIVE_SECONDS",
        "BLOCK_SECONDS",
        "API_REDIS_MAX_CONNECTIONS",
        "IDLE_CLOSE_SECONDS",
    }
)
SENTINEL_SCHEMES = {"redis+sentinel", "sentinel"}
CLUSTER_SCHEMES = {"redis+cluster", "rediss+cluster"}
_REDIS_SCHEMES = {"redis", "rediss", "unix", "redis+socket", "redis+sentinel", "sentinel", *CLUSTER_SCHEMES}
#: Buckets each global key is split into on a Redis Cluster when ``AGENTS_CELERY_INDEX_BUCKETS`` is unset.
CLUSTER_BUCKETS = 16
DEFAULT_KEY_PREFIX = "ac"
DEFAULT_QUEUE = "agents"


def default_queue(key_prefix: str) -> str:
    """The step queue of a deployment that names none: ``agents`` under the default key prefix (as ever),
    ``agents-<prefix>`` under another, so two deployments on one broker each consume only their own steps."""
    return DEFAULT_QUEUE if key_prefix == DEFAULT_KEY_PREFIX else f"{DEFAULT_QUEUE}-{key_prefix}"


class Settings(BaseSettings):
    """Configuration of a runtime, a worker or an API process."""

    model_config = SettingsConfigDict(env_prefix="AGENTS_CELERY_", extra="ignore", frozen=True)

    redis_url: str = "redis://localhost:6379/0"
    #: Celery broker; defaults to ``redis_url``. RabbitMQ works too: run state and events stay in Redis.
    broker_url: str | None = Field(default=None, validation_alias=AliasChoices("CELERY_BROKER_URL", "broker_url"))
    #: Module (``pkg.module``) whose module-level ``Agent`` objects are served.
    agents: str | None = None
    #: When set, every API route needs ``Authorization: Bearer <key>``.
    api_key: str | None = None
    #: Prefix of every Redis key; lets several deployments (or test sessions) share one Redis.
    key_prefix: str = DEFAULT_KEY_PREFIX
    #: Celery queue the step tasks go to. Unset: ``agents`` under the default prefix, ``agents-<prefix>`` under
    #: any other, so deployments sharing a broker never consume each other's steps (:func:`default_queue`).
    queue: str = DEFAULT_QUEUE
    #: How long a finished run's events and state are kept.
    retention_seconds: float = Field(default=86_400.0, gt=0)
    #: How long after retention a read still says "expired" (410) rather than "unknown" (404).
    tombstone_seconds: float = Field(default=7 * 86_400.0, ge=0)
    #: Lease of a step attempt; a worker that stops heartbeating loses the run after this long.
    lease_ttl_seconds: float = Field(default=5.0, gt=0)
    #: How often a working step renews its lease (must be well under the lease TTL).
    heartbeat_seconds: float = Field(default=1.0, gt=0)
    #: How often a running step checks for a stop request while a model streams or a tool runs.
    stop_poll_seconds: float = Field(default=0.2, gt=0)
    #: On a gevent worker (``--pool gevent``), while runs stream side by side: the process's flusher appends their
    #: events at most once per this many ms, what every run emitted meanwhile in one pipelined round trip (a
    #: fifth less worker CPU for 100 streams at once, #44); their tokens reach readers up to this much later. A
    #: run streaming alone is not held. 0 appends as soon as the flusher gets to it. Other pools write a trickle
    #: of tokens at once and are not affected.
    green_batch_ms: float = Field(default=5.0, ge=0, le=1000)
    #: After a stop, how long a running tool or a silent model may take to return before the step walks away
    #: from it (the run then ends ``cancelled`` at once; the call is abandoned on its thread).
    stop_grace_seconds: float = Field(default=2.0, ge=0)
    #: Abandoned calls (above) still running on their threads past which a worker process takes no new step:
    #: each refused step is handed back (the sweeper sends it again, to any worker) until some of them return.
    max_abandoned_threads: int = Field(default=16, ge=1)
    #: A tool's deadline unless ``@tool(timeout=...)`` says otherwise: past it the model gets an error result.
    tool_timeout_seconds: float = Field(default=300.0, gt=0)
    #: A model turn's wall-clock deadline (not only a read timeout: a server sending keep-alives forever ends
    #: too); past it the turn fails like a timed-out call (retried, then RUN_ERROR).
    turn_timeout_seconds: float = Field(default=300.0, gt=0)
    #: How often the sweeper looks for runs whose lease expired or whose next step was never enqueued.
    sweep_interval_seconds: float = Field(default=1.0, gt=0)
    #: How long a committed step may wait for its next task to start before the sweeper re-enqueues it.
    enqueue_grace_seconds: float = Field(default=5.0, gt=0)
    #: Attempts of one step (crashes, lost leases) before the run fails with AbandonedRunError.
    max_step_attempts: int = Field(default=3, ge=1)
    #: Attempts of one step that died of a connection error (a reset, a failover, Redis restarting) not counted
    #: in ``max_step_attempts``: an infrastructure blip is not the run's failure. Past these, they count too.
    max_step_blips: int = Field(default=20, ge=0)
    #: Retries of a failing model call (timeouts, 429, 5xx) inside one step, with exponential backoff.
    model_retries: int = Field(default=3, ge=0)
    model_backoff_seconds: float = Field(default=0.5, ge=0)
    #: Structured output: how many times a final answer that fails the output schema is sent back to the model
    #: (each a model turn of its own) before the run fails with OutputValidationError.
    output_retries: int = Field(default=2, ge=0, le=20)
    #: Model turns one run may take before it fails (guards against tool loops).
    max_turns: int = Field(default=25, ge=1)
    #: Agents as tools: how deep child runs may nest (a caller's run is depth 0), and how many child runs one
    #: run may start. A call beyond either gets an error result (the model sees why); nothing is started.
    max_agent_depth: int = Field(default=3, ge=1)
    max_children: int = Field(default=16, ge=1)
    #: How long a session's conversation history is kept after its last run.
    session_ttl_seconds: float = Field(default=30 * 86_400.0, gt=0)
    #: Soft-shutdown window on SIGTERM: a step finishes or hands back within this time.
    soft_shutdown_seconds: float = Field(default=30.0, ge=0)
    #: Run-state schema commits write: 2 (conversation in its own list) or 1 (inside the state JSON: all that
    #: agents-celery 0.1 reads). Set 1 while workers of both versions run side by side, then unset.
    state_schema: int = Field(default=2, ge=1, le=2)
    #: The worker's fast paths through private internals of Celery, kombu and redis-py (see
    #: :mod:`agents_celery.broker.fastpaths`); 0 (false) uses public APIs only.
    fast_paths: bool = True
    #: Limits on what callers send (every front end enforces them through the library): an HTTP body, a run's
    #: message, the decisions of one continue, and how deep JSON may nest.
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    max_message_chars: int = Field(default=100_000, ge=1)
    #: Limits on the images and files of user messages (:mod:`agents_celery.content`): bytes of one part's data
    #: (a data URL decoded), and of all the parts one run takes in. HTTP bodies that carry parts may be as large
    #: as the run's parts (base64 included) whatever ``max_body_bytes`` says.
    max_part_bytes: int = Field(default=10 * 1_048_576, ge=1)
    max_input_bytes: int = Field(default=20 * 1_048_576, ge=1)
    max_decisions: int = Field(default=100, ge=1)
    max_json_depth: int = Field(default=32, ge=2)
    #: Signs the webhooks of runs (HMAC-SHA256); runs may name a ``webhook_url`` only when it is set.
    webhook_secret: str | None = None
    #: Delivery attempts after the first, ``webhook_backoff_seconds`` * 2^n apart (at most 10 minutes).
    webhook_retries: int = Field(default=8, ge=0)
    webhook_backoff_seconds: float = Field(default=2.0, gt=0)
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    #: The operator's own webhook receivers inside the network, comma-separated: host names, ``host:port``, IP
    #: addresses or CIDR networks. Every other loopback, private, link-local or reserved address is refused
    #: (:mod:`agents_celery.webhook`). A host's settings dict may give a list.
    webhook_allow: str = ""
    #: Redis Cluster (docs/cluster.md): how many keys each global key is split into (unset: 16 on a cluster, 1
    #: otherwise). Changing it on a deployment with runs hides the runs indexed under the old split.
    index_buckets: int | None = None
    #: The failover fence (docs/cluster.md): a commit, a run's creation and a status change wait until this many
    #: replicas hold them (Redis ``WAIT``), at most ``wait_replicas_timeout_ms``; 0 (the default) waits for none.
    wait_replicas: int = Field(default=0, ge=0)
    wait_replicas_timeout_ms: int = Field(default=100, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _queue_of_prefix(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("queue") is None and data.get("key_prefix"):
            return {**data, "queue": default_queue(str(data["key_prefix"]))}
        return data

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str) -> str:
        scheme = urlparse(value).scheme
        if scheme not in _REDIS_SCHEMES:
            raise ValueError(f"expected a redis:// rediss:// or unix:// URL, got {value!r}")
        if scheme in CLUSTER_SCHEMES:
            parse_cluster(value)
        return value

    @field_validator("broker_url")
    @classmethod
    def _check_broker_url(cls, value: str | None) -> str | None:
        if value and (urlparse(value).scheme in CLUSTER_SCHEMES or "cluster" in urlparse(value).scheme):
            raise ValueError(
                f"{value!r} is a Redis Cluster URL, and Celery cannot use Redis Cluster as its broker (celery#2852): "
                "give a plain Redis, Sentinel or RabbitMQ URL here; run state can stay on the cluster "
                "(AGENTS_CELERY_REDIS_URL=redis+cluster://...)"
            )
        return value

    @model_validator(mode="after")
    def _check_cluster_broker(self) -> Settings:
        if self.cluster and not self.broker_url:
            raise ValueError(
                "AGENTS_CELERY_REDIS_URL is a Redis Cluster, which Celery cannot use as its broker (celery#2852): "
                "set CELERY_BROKER_URL to a plain Redis, Sentinel or RabbitMQ URL"
            )
        if self.index_buckets is not None and not 1 <= self.index_buckets <= 1024:
            raise ValueError(f"index_buckets must be from 1 to 1024, got {self.index_buckets}")
        return self

    @property
    def cluster(self) -> bool:
        """Whether run state lives on a Redis Cluster."""
        return urlparse(self.redis_url).scheme in CLUSTER_SCHEMES

    @property
    def buckets(self) -> int:
        """How many keys each global key (indexes, live index, manifests, schedules) is split into."""
        if self.index_buckets is not None:
            return self.index_buckets
        return CLUSTER_BUCKETS if self.cluster else 1

    @field_validator("webhook_allow", mode="before")
    @classmethod
    def _check_webhook_allow(cls, value: Any) -> Any:
        if isinstance(value, list | tuple | set | frozenset):
            value = ",".join(str(v) for v in value)
        if isinstance(value, str):
            WebhookAllow.parse(value)  # a ValueError names the bad entry
        return value

    @field_validator("api_key")
    @classmethod
    def _check_api_key(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is set but empty, which would turn authentication off: give a key or unset it")
        return value

    @model_validator(mode="after")
    def _check_heartbeat(self) -> Settings:
        if self.heartbeat_seconds * 2 > self.lease_ttl_seconds:
            raise ValueError(
                f"heartbeat_seconds ({self.heartbeat_seconds}) must be at most half of "
                f"lease_ttl_seconds ({self.lease_ttl_seconds})"
            )
        return self

    @property
    def celery_broker_url(self) -> str:
        """The broker URL, falling back to the Redis URL (a Sentinel URL becomes kombu's form)."""
        if self.broker_url:
            return self.broker_url
        if urlparse(self.redis_url).scheme in SENTINEL_SCHEMES:
            s = parse_sentinel(self.redis_url)
            auth = f":{s.password}@" if s.password else ""
            return ";".join(f"sentinel://{auth}{host}:{port}/{s.db}" for host, port in s.hosts)
        return self.redis_url

    @property
    def broker_transport_options(self) -> dict[str, Any]:
        """Transport options the broker URL needs (the Sentinel service name when it came from the Redis URL)."""
        if not self.broker_url and urlparse(self.redis_url).scheme in SENTINEL_SCHEMES:
            return {"master_name": parse_sentinel(self.redis_url).service}
        return {}

    @property
    def retention_ms(self) -> int:
        return int(self.retention_seconds * 1000)

    @property
    def tombstone_ms(self) -> int:
        return int(self.tombstone_seconds * 1000)

    @property
    def lease_ttl_ms(self) -> int:
        return int(self.lease_ttl_seconds * 1000)


def load_settings(**overrides: Any) -> Settings:
    """The settings, from (highest first) ``overrides``, the environment, defaults.

    Args:
        **overrides: Values by :class:`Settings` field name (``None`` means "not given").

    Returns:
        The settings.

    Raises:
        ConfigurationError: a value is invalid; the message names the environment variable and the problem.
    """
    return settings_from(None, "", **overrides)


def settings_from(host: Mapping[str, Any] | None, source: str, **overrides: Any) -> Settings:
    """The settings, from (highest first) ``overrides``, the host's configuration, the environment, defaults.

    Args:
        host: Settings from the host application's own configuration, by field name in any case (a Celery
            app's ``agents_celery`` setting, Django's ``AGENTS_CELERY``); see :func:`host_settings`.
        source: How to name the host's configuration in error messages (``app.conf.agents_celery``).
        overrides: Explicit values (``None`` means "not given").

    Raises:
        ConfigurationError: a value is invalid; the message names where it came from (the key in the host's
            configuration, or the environment variable) and what is wrong.
    """
    given = {str(k).lower(): v for k, v in (host or {}).items() if str(k).upper() not in FRONT_END_KEYS}
    unknown = sorted(set(given) - set(Settings.model_fields))
    if unknown:
        known = ", ".join(sorted(Settings.model_fields))
        raise ConfigurationError(f"{source or 'settings'}: unknown keys {unknown}; known keys: {known}")
    values = {**given, **{k: v for k, v in overrides.items() if v is not None}}
    try:
        return Settings(**values)
    except pydantic.ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "settings"
            if field in given and field not in overrides:
                where = f"{source or 'settings'}[{field!r}]"
            elif field == "broker_url":
                where = "CELERY_BROKER_URL"
            else:
                where = f"AGENTS_CELERY_{field.upper()}"
            problems.append(f"{where}: {err['msg']}")
        raise ConfigurationError("bad configuration: " + "; ".join(problems)) from None


@dataclass(frozen=True)
class SentinelURL:
    """The parts of a Sentinel URL."""

    hosts: list[tuple[str, int]]
    service: str
    db: int
    password: str | None


def _nodes(netloc: str) -> tuple[str | None, list[tuple[str, int]], str | None]:
    """``[:password@]h1:p1[,h2:p2...]`` of a Sentinel or cluster URL: its password, its nodes, and the first
    malformed node address (None when every one is ``host:port``)."""
    password = None
    if "@" in netloc:
        auth, netloc = netloc.rsplit("@", 1)
        password = unquote(auth.split(":", 1)[1]) if ":" in auth else unquote(auth)
    hosts: list[tuple[str, int]] = []
    for part in filter(None, netloc.split(",")):
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit():
            return password, hosts, part
        hosts.append((host, int(port)))
    return password, hosts, None


def parse_sentinel(url: str) -> SentinelURL:
    """Split ``redis+sentinel://[:password@]h1:p1,h2:p2/service[/db]``; ConfigurationError when malformed."""
    parsed = urlparse(url)
    password, hosts, bad = _nodes(parsed.netloc)
    if bad is not None:
        raise ConfigurationError(f"AGENTS_CELERY_REDIS_URL: bad Sentinel address {bad!r} in {url!r}")
    path = [p for p in parsed.path.split("/") if p]
    if not hosts or not path or (len(path) > 1 and not path[1].isdigit()):
        raise ConfigurationError(
            f"AGENTS_CELERY_REDIS_URL: expected redis+sentinel://host:port[,host:port]/service_name[/db], got {url!r}"
        )
    return SentinelURL(hosts, path[0], int(path[1]) if len(path) > 1 else 0, password or None)


@dataclass(frozen=True)
class ClusterURL:
    """The parts of a Redis Cluster URL."""

    hosts: list[tuple[str, int]]
    password: str | None
    tls: bool


def parse_cluster(url: str) -> ClusterURL:
    """Split ``redis+cluster://[:password@]h1:p1[,h2:p2...]`` (``rediss+cluster`` for TLS); ValueError when
    malformed."""
    parsed = urlparse(url)
    password, hosts, bad = _nodes(parsed.netloc)
    if bad is not None:
        raise ValueError(f"bad cluster node address {bad!r} in {url!r}: expected host:port")
    if not hosts or parsed.path.strip("/") not in ("", "0"):
        raise ValueError(f"expected redis+cluster://host:port[,host:port...] (a cluster has only db 0), got {url!r}")
    return ClusterURL(hosts, password or None, parsed.scheme.startswith("rediss"))
