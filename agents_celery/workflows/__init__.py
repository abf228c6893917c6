"""Workflows: agents and functions in a durable graph (:mod:`.plan` the vocabulary, :mod:`.workflow` the workflow
served like an agent, :mod:`.walk` where a run stands in its plan, :mod:`.runner` a step of a workflow run)."""

from __future__ import annotations

from .plan import Condition, Loop, Parallel, Router, Step, StepInput
from .workflow import Workflow

__all__ = ["Condition", "Loop", "Parallel", "Router", "Step", "StepInput", "Workflow"]
