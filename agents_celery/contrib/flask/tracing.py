"""OpenTelemetry spans for a Flask app's requests, carried into the step tasks they enqueue."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import Flask

from ...broker.observability import instrument_tracing

if TYPE_CHECKING:
    from celery import Celery


def instrument(celery_app: Celery, flask_app: Flask) -> bool:
    """Trace step tasks and ``flask_app``'s requests; returns whether tracing is on (OpenTelemetry installed)."""
    if not instrument_tracing(celery_app):
        return False
    trace_requests(flask_app)
    return True


def trace_requests(flask_app: Flask) -> None:
    """One server span per request, continuing the caller's ``traceparent`` (FlaskInstrumentor if present)."""
    try:
        from opentelemetry.instrumentation.flask import FlaskInstrumentor

        FlaskInstrumentor().instrument_app(flask_app)
        return
    except ImportError:
        pass
    from flask import g, request
    from opentelemetry import context, propagate, trace

    tracer = trace.get_tracer("agents_celery.contrib.flask")

    @flask_app.before_request
    def _start_span() -> None:
        parent = propagate.extract(request.headers)  # case-insensitive, unlike a dict
        name = f"{request.method} {request.url_rule.rule if request.url_rule else request.path}"
        span = tracer.start_span(name, context=parent, kind=trace.SpanKind.SERVER)
        g.agents_celery_span = span
        g.agents_celery_span_token = context.attach(trace.set_span_in_context(span, parent))

    @flask_app.teardown_request
    def _end_span(exc: BaseException | None = None) -> None:
        span = g.pop("agents_celery_span", None)
        token = g.pop("agents_celery_span_token", None)
        if span is not None:
            if exc is not None:
                span.record_exception(exc)
            span.end()
        if token is not None:
            context.detach(token)
