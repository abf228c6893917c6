"""CSRF for the Flask front end: a state-changing request sent with a cookie must prove it comes from this site.

A host app that logs users in with a cookie (Flask-Login, ``init_app(..., user_id=...)``) would otherwise let any
web page make its visitors' browsers approve, stop or start runs: a cross-site ``<form method=post>`` needs no
CORS preflight and carries the cookie. The blueprint checks, before each route (after the API key):

- ``GET``, ``HEAD``, ``OPTIONS``: not checked (they change nothing);
- ``Authorization: Bearer ...``: not checked (a browser never adds it on its own, and a page of another site
  cannot set it without a CORS preflight the API does not grant);
- no ``Cookie`` header: not checked (API clients, scripts), unless the browser says another site sent it
  (``Sec-Fetch-Site: cross-site``): a web page posting to an open API (no key, no login) is refused too;
- otherwise the request passes when the browser says it is same-origin (``Sec-Fetch-Site: same-origin`` or
  ``none``, a user typing the address), or its ``Origin`` is this request's own (``scheme://host``, as the
  app sees it) or one of ``trusted_origins``, or it carries the host's ``csrf_header``. Anything else (no
  ``Origin`` at all, ``Origin: null``, another site) is a 403 ``csrf_failed`` and nothing is done.

Behind a proxy that terminates TLS, the app sees ``http://``: every browser of the last years sends
``Sec-Fetch-Site`` and passes by it; for the others use werkzeug's ``ProxyFix`` or list the public origin in
``trusted_origins``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: Methods that change nothing, so a forged one does no harm.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
#: ``Sec-Fetch-Site`` values a browser sends only for a request of this site (``none``: typed or bookmarked).
SAME_SITE = frozenset({"same-origin", "none"})


def origin_of(url: str) -> str:
    """``scheme://host[:port]``, lower-cased, no trailing slash (as browsers write ``Origin``)."""
    return url.strip().rstrip("/").lower()


def trusted(origins: Iterable[str] | str) -> frozenset[str]:
    """The allow-list as the check compares it (a string: comma-separated)."""
    return frozenset(origin_of(o) for o in (origins.split(",") if isinstance(origins, str) else origins) if o.strip())


def refusal(
    method: str,
    headers: Mapping[str, str],
    own_origin: str,
    trusted_origins: frozenset[str] = frozenset(),
    csrf_header: str | None = None,
) -> str | None:
    """Why the request is refused as a possible cross-site forgery, or None when it may go on.

    Args:
        headers: The request's headers, looked up by lower-cased name.
        own_origin: ``scheme://host`` of the request as the app sees it.
    """
    fetch_site = (headers.get("sec-fetch-site") or "").strip().lower()
    # Without a cookie there is no login to abuse, unless the browser says another site sent it: a page on the
    # web posting to an open API on this machine or network (no key, no login) is refused all the same.
    if method.upper() in SAFE_METHODS or (not headers.get("cookie") and fetch_site != "cross-site"):
        return None
    scheme = (headers.get("authorization") or "").strip().partition(" ")[0]
    if scheme.lower() == "bearer":
        return None
    if fetch_site in SAME_SITE:
        return None
    origin = headers.get("origin")
    if origin is not None and origin_of(origin) in {origin_of(own_origin), *trusted_origins}:
        return None
    if csrf_header and headers.get(csrf_header.lower()):
        return None
    seen = f"Origin {origin!r}" if origin is not None else "no Origin header"
    if fetch_site:
        seen += f", Sec-Fetch-Site {fetch_site!r}"
    return (
        f"cross-site request refused: a {method.upper()} from a browser must come from this site ({seen}; "
        f"this site is {origin_of(own_origin)!r}). Send it from a page of this site, list its origin in "
        "init_app(trusted_origins=...), or call with 'Authorization: Bearer <key>'"
    )
