"""URLs of the example project."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("runs/<str:agent_id>", views.start_run),
    path("run/<str:run_id>", views.run_state),
    path("run/<str:run_id>/events", views.run_events),
]
