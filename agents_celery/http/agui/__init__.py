"""The AG-UI dialect: :mod:`.endpoint` (``POST /agui/<agent_id>``), :mod:`.render` (stored events -> strict AG-UI
1.0 events, also ``?format=agui``) and :mod:`.input` (an AG-UI message's content parts as the run's).
"""
