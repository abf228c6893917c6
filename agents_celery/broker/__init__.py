"""The broker wiring: the only code that imports Celery or kombu.

:mod:`.celery_app` joins a Celery app (``configure``) and registers the step task; :mod:`.publisher` sends step
tasks; :mod:`.fastpaths` holds every use of a private attribute of Celery, kombu or redis-py; :mod:`.beat` is Celery
beat's scheduler for the stored schedules.
"""

from __future__ import annotations


def patch_for_pool(argv: list[str]) -> None:
    """Monkey-patch for a green pool (``--pool gevent`` or eventlet in ``argv``), as the ``celery`` command does.

    It must run before anything imports sockets or threads, so it lives here, where importing it loads nothing
    else: ``celery`` itself imports its parts lazily.
    """
    from celery import maybe_patch_concurrency

    maybe_patch_concurrency(argv)
