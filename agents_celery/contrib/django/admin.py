"""A read-only admin page of recent runs, read from Redis (``<prefix>admin/runs/``, staff only).

It lists the newest runs (status, agent, user, last offset, pending approvals) with a link to each run's
events; nothing can be changed from it. It is a view of this app's URLs rather than a model admin: runs live
in Redis, not in your database.
"""

from __future__ import annotations

from django.contrib.auth.decorators import user_passes_test
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from ...errors import BadRequestError
from ...http.bodies import int_param
from ...storage.index import MAX_LIMIT
from .apps import config


@user_passes_test(lambda user: user.is_active and user.is_staff)  # type: ignore[untyped-decorator]
def recent_runs(request: HttpRequest) -> HttpResponse:
    try:  # ASCII digits only: str.isdigit() takes "²", which int() then refuses
        given = int_param(request.GET.get("limit"), "limit")
    except BadRequestError as exc:
        return JsonResponse({"detail": str(exc), "code": exc.code}, status=400)
    limit = 50 if given is None else max(1, min(MAX_LIMIT, given))
    runs = config().api.runtime.runs(limit=limit).runs
    prefix = request.path.removesuffix("admin/runs/")
    rows = [
        {
            "run": run,
            "events": f"{prefix}runs/{run.run_id}/events",
            "pending": ", ".join(f"{c.name}({c.arguments})" for c in run.pending) if run.status == "paused" else "",
        }
        for run in runs
    ]
    return render(
        request,
        "agents_celery/runs.html",
        {"rows": rows, "limit": limit, "title": "Recent agent runs", "site_header": "agents-celery"},
    )
