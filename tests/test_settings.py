"""Configuration from the environment: defaults, and bad values that fail at start-up naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agents_celery import ConfigurationError, Settings, load_settings

from .support.workers import ROOT


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No AGENTS_CELERY_* or CELERY_BROKER_URL from the developer's shell leaks into these tests."""
    for name in list(os.environ):
        if name.startswith("AGENTS_CELERY_") or name == "CELERY_BROKER_URL":
            monkeypatch.delenv(name)
    return monkeypatch


def test_defaults_work_on_one_machine(clean_env: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    assert settings.redis_url == "redis://localhost:6379/0"
    assert settings.celery_broker_url == settings.redis_url
    assert settings.heartbeat_seconds * 2 <= settings.lease_ttl_seconds


def test_environment_is_read(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("AGENTS_CELERY_REDIS_URL", "redis://cache:6380/2")
    clean_env.setenv("CELERY_BROKER_URL", "amqp://guest@rabbit//")
    clean_env.setenv("AGENTS_CELERY_LEASE_TTL_SECONDS", "10")
    clean_env.setenv("AGENTS_CELERY_QUEUE", "ai")
    settings = load_settings()
    assert settings.redis_url == "redis://cache:6380/2"
    assert settings.celery_broker_url == "amqp://guest@rabbit//"
    assert settings.lease_ttl_seconds == 10.0
    assert settings.queue == "ai"


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"AGENTS_CELERY_LEASE_TTL_SECONDS": "abc"}, "AGENTS_CELERY_LEASE_TTL_SECONDS"),
        ({"AGENTS_CELERY_LEASE_TTL_SECONDS": "-1"}, "AGENTS_CELERY_LEASE_TTL_SECONDS"),
        ({"AGENTS_CELERY_REDIS_URL": "http://x"}, "AGENTS_CELERY_REDIS_URL"),
        ({"AGENTS_CELERY_MAX_STEP_ATTEMPTS": "0"}, "AGENTS_CELERY_MAX_STEP_ATTEMPTS"),
        ({"AGENTS_CELERY_HEARTBEAT_SECONDS": "3", "AGENTS_CELERY_LEASE_TTL_SECONDS": "5"}, "heartbeat_seconds"),
    ],
)
def test_bad_value_names_the_variable(clean_env: pytest.MonkeyPatch, env: dict[str, str], variable: str) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert variable in str(info.value)


def test_heartbeat_must_be_at_most_half_the_lease(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("AGENTS_CELERY_HEARTBEAT_SECONDS", "3")
    clean_env.setenv("AGENTS_CELERY_LEASE_TTL_SECONDS", "5")
    with pytest.raises(ConfigurationError, match=r"at most half of lease_ttl_seconds"):
        load_settings()
    clean_env.setenv("AGENTS_CELERY_HEARTBEAT_SECONDS", "2.5")
    assert load_settings().heartbeat_seconds == 2.5


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen-instance error type is an implementation detail
        settings.queue = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("name", "value"),
    [("AGENTS_CELERY_LEASE_TTL_SECONDS", "abc"), ("AGENTS_CELERY_REDIS_URL", "http://x")],
)
def test_worker_with_bad_env_exits_with_the_variable_on_stderr(name: str, value: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTS_CELERY_")}
    env.update({"AGENTS_CELERY_AGENTS": "tests.agents.fixture", "PYTHONPATH": str(ROOT), name: value})
    proc = subprocess.run(
        [sys.executable, "-m", "agents_celery.cli", "worker", "--pool", "solo"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert name in proc.stderr
    assert "ready." not in proc.stderr
