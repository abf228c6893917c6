"""The project's own views: the useChat page of ``examples/aisdk_chat`` at ``/chat/``, beside the API it calls.

Two static files, served like any page of the project's: ``index.html`` with its ``data-api-prefix`` set to
where ``urls.py`` mounts the agents API, and the bundle ``scripts/ensure-aisdk-page`` builds into ``dist/``.
The page sends no CSRF token: without a session cookie its POSTs are an anonymous caller's (``ALLOW_ANONYMOUS``),
which need none, as an API-key client's do not; a browser logged in at ``/admin/`` would need the token.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_safe

#: The useChat example page: its index.html, and the bundle ``scripts/ensure-aisdk-page`` builds into ``dist/``.
CHAT_PAGE = Path(__file__).resolve().parent.parent / "aisdk_chat"

_API_PREFIX = re.compile(r'data-api-prefix="[^"]*"')


def api_prefix() -> str:
    """Where the agents API is mounted (``/ai``), read from the URLconf rather than written twice."""
    return reverse("agents_celery:health").removesuffix("health").rstrip("/")


@require_safe
def chat_page(request: HttpRequest) -> HttpResponse:
    """The page's ``index.html``, pointed at the API's prefix."""
    page = (CHAT_PAGE / "index.html").read_text(encoding="utf-8")
    page = _API_PREFIX.sub(lambda _: f'data-api-prefix="{html.escape(api_prefix())}"', page, count=1)
    return HttpResponse(page, content_type="text/html; charset=utf-8")


@require_safe
def chat_bundle(request: HttpRequest) -> HttpResponse:
    """The page's script, as ``scripts/ensure-aisdk-page`` bundled it. Read whole (half a megabyte): a
    ``FileResponse`` is a sync iterator, which Django under ASGI serves with a warning."""
    bundle = CHAT_PAGE / "dist" / "chat.js"
    if not bundle.is_file():
        raise Http404("the chat page is not bundled: run scripts/ensure-aisdk-page")
    return HttpResponse(bundle.read_bytes(), content_type="text/javascript; charset=utf-8")
