"""The ASGI application (uvicorn, daphne): ``uvicorn examples.django_app.asgi:application``."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")
application = get_asgi_application()
