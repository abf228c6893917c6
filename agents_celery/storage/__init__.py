"""Storage: every Redis key and Lua script, the run store, the event log, leases and Redis connections.

Nothing here imports Celery, kombu, Flask or Django. The key schema is written once, in :mod:`.keys`; every
state change of a run is one of the Lua scripts in ``lua/`` (loaded by :mod:`.scripts`).
"""
