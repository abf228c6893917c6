"""The app's URLs: ``path("ai/", include("agents_celery.contrib.django.urls"))`` (any prefix).

One pattern per path of the route table (:mod:`agents_celery.http.routes`, named after the path's first route),
between the patterns written by hand: ``health``, ``openapi.json``, the staff-only admin page, the inspector's
static files, and last a JSON 404 for any other path.
"""

from __future__ import annotations

from django.urls import URLPattern, path, re_path

from ...http.routes import paths, template
from . import admin, views

app_name = "agents_celery"

#: How a type of the table's path parameters is spelled in a Django path.
CONVERTERS = {"str": "str", "int": "int"}


def _path(route_path: str) -> str:
    return template(route_path, lambda name, kind: f"<{CONVERTERS[kind]}:{name}>").removeprefix("/")


table: list[URLPattern] = [
    path(_path(route_path), views.table_view(routes), name=routes[0].name) for route_path, routes in paths().items()
]

urlpatterns = [
    path("health", views.health, name="health"),
    path("openapi.json", views.openapi, name="openapi"),
    *table,
    path("admin/runs/", admin.recent_runs, name="admin_runs"),
    path("ui", views.ui_root, name="ui_root"),
    path("ui/", views.ui_index, name="ui"),
    path("ui/runs/<str:run_id>", views.ui_run, name="ui_run"),
    path("ui/<str:name>", views.ui_file, name="ui_file"),
    re_path(r"^(?P<path>.*)$", views.not_found),
]
