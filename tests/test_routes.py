"""The route table (agents_celery/http/routes.py) is the one source of the HTTP routes: the Flask blueprint's
``url_map``, the Django app's ``urlpatterns`` and the OpenAPI document's ``paths`` are exactly the table (plus the
routes each writes by hand, listed in ``SPECIAL``), and every route calls an existing ``API`` method with the
path's parameters. No Redis, no worker: these are the front ends' own tables, read in place."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys

import pytest
from flask import Flask

from agents_celery.contrib.flask import make_blueprint
from agents_celery.http.openapi import spec
from agents_celery.http.protocol import API
from agents_celery.http.routes import ROUTES, SPECIAL, paths

pytestmark = pytest.mark.timeout(60)

Table = dict[str, set[str]]


def table(documented_only: bool = False) -> Table:
    """Every path template of the table and the specials, with its methods."""
    found: Table = {path: {r.method for r in routes} for path, routes in paths().items()}
    for special in SPECIAL:
        if special.documented or not documented_only:
            found.setdefault(special.path, set()).add(special.method)
    return found


def braces(rule: str) -> str:
    """A Flask rule or Django route with its parameters spelled as the table does (``{name}``)."""
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule).removeprefix("/")


def test_every_route_calls_an_api_method_with_the_paths_parameters() -> None:
    assert len({r.name for r in ROUTES}) == len(ROUTES)  # names are unique (Flask endpoints)
    assert len({(r.method, r.path) for r in ROUTES}) == len(ROUTES)  # one route per method and path
    for route in ROUTES:
        method = API.unbound_handler(route)
        assert callable(method), f"{route.name}: API has no method {route.target!r}"
        params = list(inspect.signature(method).parameters.values())[2:]  # after self and the request
        required = [p.name for p in params if p.default is inspect.Parameter.empty]
        assert required == [name for name, _ in route.params], route.name


def test_the_flask_url_map_is_the_table() -> None:
    app = Flask(__name__)
    app.register_blueprint(make_blueprint())
    found: Table = {}
    endpoints: dict[tuple[str, str], str] = {}
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        methods = set(rule.methods or ()) - {"HEAD", "OPTIONS"}
        found.setdefault(braces(rule.rule), set()).update(methods)
        for method in methods:
            endpoints[method, braces(rule.rule)] = rule.endpoint
    assert found == table()
    for route in ROUTES:
        assert endpoints[route.method, route.path] == f"agents_celery.{route.name}"


def test_the_openapi_paths_are_the_table() -> None:
    document = spec()["paths"]
    found = {path: {m.upper() for m in item if m != "parameters"} for path, item in document.items()}
    assert found == table(documented_only=True)
    for route in ROUTES:
        operation = document[route.path][route.method.lower()]
        assert operation["summary"] == route.summary
        assert ("requestBody" in operation) == (route.body is not None)
        listed = [p["name"] for p in document[route.path].get("parameters", [])]
        assert listed == [name for name, _ in route.params]


#: Django's patterns, each with what its view answers to OPTIONS: a 405 naming the methods it takes (before any
#: check of who asks, so no Redis and no user is needed).
DJANGO = """
import asyncio, json, re
import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "agents_celery.contrib.django"],
    ROOT_URLCONF="agents_celery.contrib.django.urls", ALLOWED_HOSTS=["*"], SECRET_KEY="test",
)
django.setup()
from django.test import RequestFactory
from agents_celery.contrib.django import urls

out = []
for pattern in urls.urlpatterns:
    route, name = str(pattern.pattern), pattern.name
    if name in ("admin_runs", None):  # the admin page (Django's login decorator) and the catch-all 404
        out.append([route, name, None])
        continue
    kwargs = {key: "x" for key in re.findall(r"<\\w+:(\\w+)>", route)}
    answer = asyncio.run(pattern.callback(RequestFactory().options("/" + route), **kwargs))
    assert answer.status_code == 405, (route, answer.status_code)
    out.append([route, name, answer["Allow"].split(", ")])
print(json.dumps(out))
"""


def test_the_django_urlpatterns_are_the_table() -> None:
    done = subprocess.run([sys.executable, "-c", DJANGO], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    patterns = json.loads(done.stdout)
    assert [p[:2] for p in patterns[-1:]] == [["^(?P<path>.*)$", None]]  # last: a JSON 404 for any other path
    assert ["admin/runs/", "admin_runs", None] in patterns  # the staff-only admin page
    found: Table = {}
    names: dict[str, str] = {}
    for route, name, allowed in patterns:
        if allowed is not None:
            found.setdefault(braces(route), set()).update(allowed)
            names[braces(route)] = name
    assert found == table()
    for path, routes in paths().items():
        assert names[path] == routes[0].name
        allowed = next(p[2] for p in patterns if braces(p[0]) == path)
        assert allowed == [r.method for r in routes]  # the Allow header lists them in the table's order


def test_only_health_and_the_inspectors_files_are_open() -> None:
    from agents_celery.contrib.flask.routes import OPEN

    opened = {special.name for special in SPECIAL if special.open}
    assert opened == {"health", "ui_root", "ui_index", "ui_run", "ui_file"}  # no route of the table
    assert {f"agents_celery.{name}" for name in opened} == OPEN  # Flask lets anyone ask exactly these


def test_the_openapi_document_has_no_dangling_ref() -> None:
    """Every ``$ref`` of the document names a schema it has (a small walker: openapi-spec-validator is not in the
    lock)."""
    from typing import Any

    from agents_celery.http.openapi import spec

    document = spec()
    schemas = document["components"]["schemas"]
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert refs and all(ref.startswith("#/components/schemas/") for ref in refs), refs
    dangling = sorted({ref for ref in refs if ref.removeprefix("#/components/schemas/") not in schemas})
    assert dangling == [], dangling
