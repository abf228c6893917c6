"""The engine: one attempt of one step of one run (a model turn or the tool calls of a turn).

It takes the run's lease, does the step, and commits the new checkpoint; it knows nothing of Celery or kombu
(the broker layer, :mod:`agents_celery.broker`, calls it and hands it what the broker delivered).
"""
