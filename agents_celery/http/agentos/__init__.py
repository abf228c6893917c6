"""The AgentOS dialect (the ``/agents/...`` routes): :mod:`.render` turns stored events into Agno AgentOS
events. Its routes are the shared protocol's (:mod:`agents_celery.http.protocol`).
"""
