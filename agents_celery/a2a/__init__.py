"""A2A's view of a run, shared by the door (:mod:`agents_celery.http.a2a`) and the worker's push deliveries
(:mod:`agents_celery.broker.a2apush`): :mod:`.task` folds a run's log into an A2A Task and its updates."""
