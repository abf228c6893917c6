"""What Redis answers, as Python values: redis-py gives bytes unless a client decodes, and our clients do not."""

from __future__ import annotations

from typing import Any


def as_text(value: Any) -> str:
    """A reply (bytes, or a number or string already) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
