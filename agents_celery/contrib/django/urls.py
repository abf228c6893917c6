"""The app's URLs: ``path("ai/", include("agents_celery.contrib.django.urls"))`` (any prefix)."""

from __future__ import annotations

from django.urls import path, re_path

from . import admin, views

app_name = "agents_celery"

urlpatterns = [
    path("health", views.health, name="health"),
    path("openapi.json", views.openapi, name="openapi"),
    path("agents", views.list_agents, name="agents"),
    path("agents/<str:agent_id>", views.get_agent, name="agent"),
    path("agents/<str:agent_id>/runs", views.create_run, name="create_run"),
    path("agents/<str:agent_id>/runs/<str:run_id>/continue", views.continue_run, name="continue_run"),
    path("agents/<str:agent_id>/runs/<str:run_id>/resume", views.resume_run, name="resume_run"),
    path("agents/<str:agent_id>/runs/<str:run_id>/cancel", views.cancel_run, name="cancel_run"),
    path("agents/<str:agent_id>/runs/<str:run_id>/stop", views.cancel_run, name="stop_run"),
    path("runs", views.list_runs, name="runs"),
    path("runs/<str:run_id>", views.get_run, name="run"),
    path("sessions", views.list_sessions, name="sessions"),
    path("sessions/<str:session_id>", views.get_session, name="session"),
    path("runs/<str:run_id>/events", views.run_events, name="run_events"),
    path("runs/<str:run_id>/messages", views.send_message, name="send_message"),
    path("schedules", views.schedules, name="schedules"),
    path("schedules/<str:schedule_id>", views.schedule, name="schedule"),
    path("schedules/<str:schedule_id>/pause", views.pause_schedule, name="pause_schedule"),
    path("schedules/<str:schedule_id>/resume", views.resume_schedule, name="resume_schedule"),
    path("agui/<str:agent_id>", views.agui_run, name="agui_run"),
    path("agui/<str:agent_id>/connect", views.agui_connect, name="agui_connect"),
    path("admin/runs/", admin.recent_runs, name="admin_runs"),
    path("ui", views.ui_root, name="ui_root"),
    path("ui/", views.ui_index, name="ui"),
    path("ui/runs/<str:run_id>", views.ui_run, name="ui_run"),
    path("ui/<str:name>", views.ui_file, name="ui_file"),
    re_path(r"^(?P<path>.*)$", views.not_found),
]
