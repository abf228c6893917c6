"""URLs of the example project: the admin, agents-celery's API under /ai/, and the useChat page at /chat/."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from . import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ai/", include("agents_celery.contrib.django.urls")),
    path("chat/", views.chat_page, name="chat_page"),
    path("chat/chat.js", views.chat_bundle, name="chat_bundle"),
]
