"""What a user installs and imports: extras instead of forced dependencies, a light client, lazy public names.

Each import check runs in a fresh interpreter, so what the test process already imported does not count.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import tomllib
from collections.abc import Callable
from typing import Any

import pytest

from .support.workers import ROOT

HEAVY = {"celery", "kombu", "redis", "flask", "werkzeug", "django", "openai", "rich"}


def loaded_after(code: str, without: tuple[str, ...] = ()) -> set[str]:
    """The top-level packages among HEAVY that ``code`` loads in a fresh interpreter; the packages ``without``
    are made unimportable first, as if they were not installed (``import`` raises ImportError)."""
    block = "".join(f"sys.modules[{name!r}] = None\n" for name in without)
    probe = (
        f"import sys\n{block}{code}\nimport json\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}})))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1])) & HEAVY


def test_import_agents_celery_loads_nothing_heavy() -> None:
    assert loaded_after("import agents_celery") == set()


def test_what_an_agents_module_imports_loads_no_celery_and_no_web_framework() -> None:
    code = "from agents_celery import Agent, tool, ToolContext, ScriptedModel, OpenAIChat, Hooks, StopStep"
    assert loaded_after(code) == set()  # OpenAIChat imports openai when it makes its first call


def test_the_http_client_loads_httpx_only() -> None:
    code = "import agents_celery.client, agents_celery.client.aio\nfrom agents_celery.client import Client"
    # httpx itself imports rich for its command line when rich happens to be installed: not ours to load.
    assert loaded_after(code) - {"rich"} == set()
    assert loaded_after(code, without=("rich",)) == set()


def test_the_runtime_needs_no_web_framework() -> None:
    """kombu's JSON module imports Django when it is installed (to encode its lazy strings): in a Django shop
    that is already loaded. Without Flask and Django installed, the Runtime works and loads neither."""
    code = "from agents_celery import Runtime\nRuntime(redis_url='redis://127.0.0.1:6379/9').close()"
    assert loaded_after(code, without=("flask", "werkzeug", "django", "rich")) == {"celery", "kombu", "redis"}


def test_the_flask_api_needs_no_django() -> None:
    code = "from agents_celery.contrib.flask import create_app\nimport agents_celery.client"
    assert "django" not in loaded_after(code, without=("django",))


def test_every_public_name_resolves() -> None:
    code = "import agents_celery as a\nmissing = [n for n in a.__all__ if getattr(a, n, None) is None]\nprint(missing)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr or out.stdout


def _takes_arguments(obj: Callable[..., Any]) -> bool:
    """Whether ``obj`` (a function, or a class by its constructor) takes an argument besides ``self``."""
    return any(name != "self" for name in inspect.signature(obj).parameters)


def test_the_public_api_documents_its_arguments() -> None:
    """Issue #40: every public callable that takes arguments has a Google-style ``Args:`` section."""
    import agents_celery as a
    from agents_celery.runtime import RunStream, Runtime
    from agents_celery.testing import FakeOpenAIServer, InlineRunner

    classes = [a.Agent, a.MCPTools, a.LastTurns, a.Summarize, a.OpenAIChat, a.ScriptedModel, a.ScriptedTurn]
    classes += [a.ScriptedToolCall, Runtime, InlineRunner, FakeOpenAIServer]
    found: dict[str, Callable[..., Any]] = {cls.__name__: cls for cls in classes}
    for cls in (Runtime, RunStream, InlineRunner, FakeOpenAIServer):
        for name, method in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_"):
                found[f"{cls.__name__}.{name}"] = method
    found.update((name, value) for name in a.__all__ if inspect.isfunction(value := getattr(a, name)))
    undocumented = [name for name, obj in found.items() if "Args:" not in (obj.__doc__ or "")]
    missing = sorted(name for name in undocumented if _takes_arguments(found[name]))
    assert missing == []


def _requirement_names(requirements: list[str]) -> set[str]:
    names = set()
    for req in requirements:
        name = req.split(";")[0].strip()
        for sep in "[<>=!~ ":
            name = name.split(sep)[0]
        names.add(name.lower())
    return names


def test_the_core_install_is_what_a_worker_needs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _requirement_names(project["dependencies"])
    assert core == {
        "celery", "kombu", "packaging", "redis", "pydantic", "pydantic-settings", "openai", "ag-ui-protocol",
        "jsonschema",
    }  # fmt: skip
    extras = project["optional-dependencies"]
    assert _requirement_names(extras["flask"]) == {"flask"}
    assert _requirement_names(extras["django"]) == {"django"}
    assert _requirement_names(extras["client"]) == {"httpx"}
    assert "flask" not in _requirement_names(extras["django"])  # a Django shop never gets Flask
    for req in project["dependencies"]:
        assert "<" in req, f"{req!r} has no upper bound"


@pytest.mark.timeout(120)
def test_a_plain_install_resolves_without_flask_django_or_rich(tmp_path: object) -> None:
    """What ``pip install agents-celery`` would install, resolved by pip from the registry (nothing installed)."""
    report = f"{tmp_path}/report.json"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--report",
        report,
        ".",
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr[-2000:]
    with open(report) as fh:
        names = {item["metadata"]["name"].lower() for item in json.load(fh)["install"]}
    assert {"celery", "kombu", "redis", "openai", "pydantic"} <= names
    assert not names & {"flask", "werkzeug", "django", "rich", "gunicorn", "gevent", "flower"}, sorted(names)


def test_the_django_app_needs_no_flask() -> None:
    code = (
        "import os\nos.environ['DJANGO_SETTINGS_MODULE'] = 'examples.django_app.settings'\nimport django\n"
        "django.setup()\nimport agents_celery.contrib.django.urls, agents_celery.contrib.django.views"
    )
    assert loaded_after(code, without=("flask", "werkzeug")) & {"flask", "werkzeug"} == set()


def test_a_worker_and_the_operator_commands_load_without_httpx_and_rich() -> None:
    """The core install has neither (openai 3.x brings httpx2, not httpx): the worker's app (webhooks included) and
    the CLI's printer must not need them. tests/test_fresh_install.py proves it in a clean venv."""
    code = (
        "import agents_celery.broker.worker, agents_celery.broker.webhooks\n"
        "from agents_celery.cli.render import Printer\nPrinter().line('plain')"
    )
    assert loaded_after(code, without=("httpx", "rich", "flask", "werkzeug", "django")) <= {"celery", "kombu", "redis"}
