"""The OpenAI Responses dialect under ``/v1``: :mod:`.endpoint` (the routes), :mod:`.render` (a run's log as
Responses objects and stream events), :mod:`.input` (Responses input items as the run's input), :mod:`.items`
(input items listings), :mod:`.retry` (an identical retry joins the first request) and :mod:`.turn` (which run a
request continues).
"""
