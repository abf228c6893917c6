"""Views: start a run and stream its events as SSE; reconnect from an offset; read a run's state."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from agents_celery import AgentsCeleryError, NotFoundError, RunExpiredError, RunStream, Runtime

from .celery import agents, app


@cache
def runtime() -> Runtime:
    """One Runtime per process, sending step tasks through the project's Celery app."""
    return Runtime(settings=agents.settings, celery_app=app)


def sse(stream: RunStream, after: int | None = None) -> StreamingHttpResponse:
    """The run's events after ``after`` (all when None), live until the run ends or pauses."""

    def frames() -> Iterator[str]:
        for event in stream.events(offset=after):
            yield f"id: {event.offset}\nevent: {event.type.value}\ndata: {json.dumps(event.to_dict())}\n\n"

    response = StreamingHttpResponse(frames(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


@csrf_exempt
@require_POST
def start_run(request: HttpRequest, agent_id: str) -> HttpResponse:
    message = request.POST.get("message", "")
    try:
        stream = runtime().stream(agent_id, message, session_id=request.POST.get("session_id") or None)
    except NotFoundError as exc:
        return JsonResponse({"detail": str(exc)}, status=404)
    except AgentsCeleryError as exc:
        return JsonResponse({"detail": str(exc)}, status=400)
    response = sse(stream)
    response["X-Run-Id"] = stream.id
    return response


@require_GET
def run_events(request: HttpRequest, run_id: str) -> HttpResponse:
    after = request.GET.get("after") or request.headers.get("Last-Event-ID")
    if after is not None and not after.lstrip("-").isdigit():
        return HttpResponseBadRequest("after must be an integer offset")
    try:
        stream = runtime().get_stream(run_id)
    except NotFoundError as exc:
        return JsonResponse({"detail": str(exc)}, status=404)
    except RunExpiredError as exc:
        return JsonResponse({"detail": str(exc)}, status=410)
    return sse(stream, None if after is None else int(after))


@require_GET
def run_state(request: HttpRequest, run_id: str) -> HttpResponse:
    try:
        return JsonResponse(runtime().get(run_id).to_dict())
    except NotFoundError as exc:
        return JsonResponse({"detail": str(exc)}, status=404)
