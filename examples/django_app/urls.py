"""URLs of the example project: the admin, and agents-celery's API under /ai/."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ai/", include("agents_celery.contrib.django.urls")),
]
