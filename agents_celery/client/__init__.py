"""HTTP client of the agents-celery API (httpx only: no Celery, kombu, redis-py, Flask or Django is loaded).

Same names and return types as the :class:`~agents_celery.Runtime`: persist the run id and the offset of the
last event you handled; to pick up again, ``client.get_stream(run_id).events(offset)``. A stream reconnects by
itself when the connection drops, skips any offset it already delivered and raises StreamGapError if an offset
were ever missing, so every event is delivered exactly once::

    with Client("http://localhost:7777", api_key=...) as client:
        stream = client.stream("assistant", "What time is it?")
        for event in stream.events():            # Event: .offset, .type, .data
            save(stream.run_id, event.offset)    # what to persist
        if client.get(stream.run_id).status == "paused":
            stream = client.continue_run(stream.run_id)   # None approves every pending call

:class:`~agents_celery.client.aio.AsyncClient` is the asyncio twin. HTTP errors become the library's
exceptions (:mod:`agents_celery.errors`): the JSON body's ``code`` picks the class (``run_not_found`` ->
RunNotFoundError ...), else the status does (the most general class of it: 404 NotFoundError, 409 StateError, 410
RunExpiredError, 400/422 ValidationError, 413 PayloadTooLargeError, 503 RedisUnavailableError, 401
AuthenticationError, 403 ForbiddenError), else APIError.
"""

from __future__ import annotations

from .plans import Backoff
from .sync import Client, RunStream

__all__ = ["Backoff", "Client", "RunStream"]
