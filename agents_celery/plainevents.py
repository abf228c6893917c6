"""Flat events serialised without a pydantic round trip, checked against the AG-UI model's own fields.

Most events a step writes (STEP_STARTED, TOOL_CALL_START, TOOL_CALL_RESULT ...) carry only strings, a
literal or a small ``metadata`` dict. For those, :func:`plain_json` checks the given fields against what
``ag-ui-protocol``'s model declares (names, required fields, ``str`` / ``Optional[str]`` / ``Literal``
types) and writes the JSON ``model_dump(mode="json", exclude_none=True)`` would write, in the model's
field order, at a sixth of the cost. Anything else (another type, a nested object, an unknown field, a
missing one) returns None and goes through pydantic, which also produces the error message.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any

import pydantic

_SIMPLE = (str, int, bool)
_MAX_TS = 9007199254740991


def _checker(annotation: Any) -> Any:
    """A predicate for values of a plain field type, or None when the type is not plain."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if annotation is str:
        return lambda v: isinstance(v, str)
    if origin is typing.Literal and all(isinstance(a, str) for a in args):
        allowed = {str(a) for a in args}
        return lambda v: isinstance(v, str) and v in allowed
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            check = _checker(inner[0])
            return (lambda v: v is None or check(v)) if check else None
        if str in inner:  # e.g. content: str | list[parts]: only the str form is plain
            return lambda v: isinstance(v, str)
    if origin is dict and args and args[0] is str:  # metadata: flat, no None values
        return lambda v: (
            isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, _SIMPLE) for k, x in v.items())
        )
    return None


class PlainShape:
    """What one AG-UI model accepts as a plain event."""

    def __init__(self, model: type[pydantic.BaseModel]) -> None:
        self.order: list[str] = []
        self.checks: dict[str, Any] = {}
        self.required: set[str] = set()
        for name, info in model.model_fields.items():
            if name in ("type", "timestamp"):
                continue
            check = None if info.metadata else _checker(info.annotation)  # constraints: pydantic's job
            if check is None:
                continue  # such a field may not be given on the plain path
            self.order.append(name)
            self.checks[name] = check
            if info.is_required():
                self.required.add(name)
        # A model with a required field of another type (RUN_FINISHED's ids are plain, CUSTOM's value is not)
        # can never be given plainly.
        self.usable = all(n in self.checks for n, i in model.model_fields.items() if i.is_required())

    def dump(self, kind: str, fields: dict[str, Any]) -> str | None:
        ts = fields.get("timestamp")
        if not self.usable or not isinstance(ts, int) or isinstance(ts, bool) or abs(ts) > _MAX_TS:
            return None
        given = fields.keys() - {"timestamp"}
        if not self.required <= given or not given <= self.checks.keys():
            return None
        for name in given:
            if not self.checks[name](fields[name]):
                return None
        data: dict[str, Any] = {"type": kind, "timestamp": ts}
        for name in self.order:
            value = fields.get(name)
            if value is not None:
                data[name] = value
        return json.dumps(data, separators=(",", ":"))
