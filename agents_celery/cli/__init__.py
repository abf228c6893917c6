"""The ``agents-celery`` command (:mod:`.main`) and the demo it runs."""

from __future__ import annotations

from .main import main

__all__ = ["main"]
