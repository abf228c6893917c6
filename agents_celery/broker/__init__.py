"""The broker wiring: the only code that imports Celery or kombu.

:mod:`.celery_app` joins a Celery app (``configure``) and registers the step task; :mod:`.publisher` sends step
tasks; :mod:`.fastpaths` holds every use of a private attribute of Celery, kombu or redis-py.
"""
