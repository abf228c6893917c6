"""Structured output: the JSON a run must answer with, how the model is asked for it, and how an answer is checked.

An agent's ``output_type`` (a pydantic model or a JSON Schema dict) or a run's ``output_schema`` (a JSON Schema
dict; it wins over the agent's) is an :class:`OutputSpec`. The model is asked with Chat Completions'
``response_format`` ``{"type": "json_schema", "json_schema": {name, schema, strict}}``; the schema is made strict
by the rules of the openai SDK's ``to_strict_json_schema`` (a private helper of the SDK, so written again here:
objects get ``additionalProperties: false`` and every property required, ``None`` defaults go, a ``$ref`` with
siblings is inlined, a one-entry ``allOf`` is flattened) when the result stays inside what strict mode accepts
(an object at the root, no keyword strict mode refuses, no ``additionalProperties`` other than false, local
``$ref`` only); otherwise the schema is sent as given with ``strict: false``. Every answer the strict schema
accepts is one the given schema accepts, so the check below is the same either way.

The final answer (a turn without tool calls) is checked: pydantic's ``model_validate_json`` for a model,
``jsonschema`` for a dict. :meth:`OutputSpec.check` returns the validated JSON value (a model's
``model_dump(mode="json")``, defaults filled in) or raises :class:`~agents_celery.errors.OutputValidationError`
with what is wrong, which the engine sends back to the model (:data:`RETRY_PREFIX`).
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pydantic

from .errors import OutputSchemaError, OutputValidationError, PayloadTooLargeError

#: How the message that sends a failed validation back to the model starts (tests' fake servers look for it).
RETRY_PREFIX = "Your answer does not match the required output schema"
#: The most characters an ``output_schema`` may have, as JSON.
MAX_SCHEMA_CHARS = 65_536
#: Keywords OpenAI's strict mode refuses (a schema using one is sent with ``strict: false``).
_NOT_STRICT = frozenset(
    {
        "patternProperties", "unevaluatedProperties", "propertyNames", "minProperties", "maxProperties",
        "unevaluatedItems", "contains", "minContains", "maxContains", "uniqueItems", "if", "then", "else", "not",
        "dependentRequired", "dependentSchemas", "dependencies", "allOf", "oneOf",
    }
)  # fmt: skip
_NAME = re.compile(r"[^a-zA-Z0-9_-]")
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```$", re.DOTALL)


@dataclass(frozen=True)
class OutputSpec:
    """What a run's final answer must be: a JSON Schema (with a name for ``response_format``) and, for a pydantic
    ``output_type``, the model class that checks it and that ``Runtime.run`` returns an instance of."""

    schema: dict[str, Any]
    name: str = "output"
    model: type[pydantic.BaseModel] | None = None

    @functools.cached_property
    def strict(self) -> dict[str, Any] | None:
        """The schema made strict (None: strict mode cannot express it)."""
        return strict_schema(self.schema)

    def response_format(self) -> dict[str, Any]:
        """The Chat Completions ``response_format`` asking for this output."""
        strict = self.strict
        schema = strict if strict is not None else self.schema
        return {
            "type": "json_schema",
            "json_schema": {"name": self.name, "schema": schema, "strict": strict is not None},
        }

    def check(self, text: str) -> Any:
        """The validated JSON value of an answer; OutputValidationError saying what is wrong otherwise."""
        text = _unfenced(text)
        if self.model is not None:
            try:
                return self.model.model_validate_json(text).model_dump(mode="json")
            except pydantic.ValidationError as exc:
                raise OutputValidationError(_pydantic_problems(exc)) from None
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise OutputValidationError(f"the answer is not JSON ({exc})") from None
        problems = [_at(e) for e in _validator(self.schema).iter_errors(value)]
        if problems:
            raise OutputValidationError("; ".join(problems[:5]))
        return value

    def instance(self, value: Any) -> Any:
        """A checked value as the caller gets it: the model's instance (a pydantic output_type), else the value."""
        return self.model.model_validate(value) if self.model is not None else value


def output_spec(output_type: Any) -> OutputSpec | None:
    """The spec of an agent's ``output_type``: a pydantic model class or a JSON Schema dict (None: plain text)."""
    if output_type is None:
        return None
    if isinstance(output_type, type) and issubclass(output_type, pydantic.BaseModel):
        return OutputSpec(output_type.model_json_schema(), _name(output_type.__name__), output_type)
    if isinstance(output_type, dict):
        schema = check_schema(output_type)
        return OutputSpec(schema, _name(schema.get("title")))
    raise OutputSchemaError(f"output_type must be a pydantic model class or a JSON Schema dict, got {output_type!r}")


def run_spec(schema: dict[str, Any]) -> OutputSpec:
    """The spec of a run's ``output_schema`` (already checked with :func:`check_schema`)."""
    return OutputSpec(schema, _name(schema.get("title")))


def spec_for(agent_spec: OutputSpec | None, run_schema: dict[str, Any] | None) -> OutputSpec | None:
    """What a run's final answer must be: its own ``output_schema`` if it has one, else its agent's."""
    return run_spec(run_schema) if run_schema is not None else agent_spec


def check_schema(schema: Any) -> dict[str, Any]:
    """``schema`` when it is a valid JSON Schema object; OutputSchemaError (HTTP 422) naming the problem.

    Only local references (``#/...``) are taken: a schema never makes a worker fetch anything.
    """
    if not isinstance(schema, dict):
        raise OutputSchemaError(f"output_schema must be a JSON Schema object, got {type(schema).__name__}")
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError) as exc:
        raise OutputSchemaError(f"output_schema is not JSON: {exc}") from None
    if size > MAX_SCHEMA_CHARS:
        raise PayloadTooLargeError(f"output_schema has {size} characters as JSON; at most {MAX_SCHEMA_CHARS}")
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(root)"
        raise OutputSchemaError(f"output_schema is not a valid JSON Schema: at {where}: {exc.message}") from None
    for ref in _refs(schema):
        if not ref.startswith("#"):
            raise OutputSchemaError(f"output_schema may only use local references ('#/...'), not {ref!r}")
        if not _points_somewhere(schema, ref):
            raise OutputSchemaError(f"output_schema: $ref {ref!r} points at nothing in the schema")
    return schema


def strict_schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """``schema`` under the openai SDK's strict rules (see the module docs); None when strict mode cannot take it."""
    if schema.get("type") != "object" or any(not r.startswith("#/") for r in _refs(schema)):
        return None
    try:
        root = copy.deepcopy(schema)
        strict = _ensure_strict(root, root)
    except (KeyError, TypeError, ValueError, RecursionError):
        return None
    return strict if _strict_ok(strict) else None


def stream_options(model: Any, spec: OutputSpec | None) -> dict[str, Any]:
    """The keyword arguments asking ``model.stream`` for ``spec``: ``response_format`` when it takes one."""
    if spec is None or not _takes_response_format(type(model)):
        return {}
    return {"response_format": spec.response_format()}


def prompt_hint(spec: OutputSpec) -> str:
    """What the system prompt says of the output, for a model whose ``stream`` takes no ``response_format``."""
    return "Answer with JSON only, matching this JSON Schema:\n" + json.dumps(spec.schema)


def retry_message(error: str) -> dict[str, Any]:
    """The user message that sends a failed validation back to the model."""
    text = f"{RETRY_PREFIX}: {error}. Answer again with only the corrected JSON."
    return {"role": "user", "content": text}


# -- helpers -----------------------------------------------------------------------------------------


_TAKES: dict[type, bool] = {}


def _takes_response_format(model_type: type) -> bool:
    """Whether ``model_type.stream`` takes ``response_format`` (looked up once per class)."""
    known = _TAKES.get(model_type)
    if known is None:
        known = _TAKES[model_type] = _signature_takes(model_type)
    return known


def _signature_takes(model_type: type) -> bool:
    stream = getattr(model_type, "stream", None)
    if stream is None:
        return False
    try:
        params = inspect.signature(stream).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "response_format" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


@functools.lru_cache(maxsize=128)
def _validator_cached(text: str) -> Any:
    import jsonschema

    schema = json.loads(text)
    return jsonschema.validators.validator_for(schema)(schema)


def _validator(schema: dict[str, Any]) -> Any:
    return _validator_cached(json.dumps(schema, sort_keys=True))


def _at(error: Any) -> str:
    where = "/".join(str(p) for p in error.absolute_path)
    return f"at {where}: {error.message}" if where else error.message


def _pydantic_problems(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"at {where}: {err['msg']}" if where else str(err["msg"]))
    return "; ".join(parts)


def _unfenced(text: str) -> str:
    """The answer without a Markdown code fence around it (models that were not asked strictly add one)."""
    stripped = text.strip()
    match = _FENCE.match(stripped)
    return match.group(1) if match else stripped


def _name(title: Any) -> str:
    """A ``json_schema.name`` (OpenAI: 1-64 letters, digits, '_' or '-')."""
    name = _NAME.sub("_", title)[:64] if isinstance(title, str) else ""
    return name or "output"


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _points_somewhere(root: dict[str, Any], ref: str) -> bool:
    """Whether the local reference ``ref`` names a part of ``root`` (a JSON Pointer, ``#`` itself, or an
    ``$anchor``). A schema with resources of its own (a nested ``$id``) resolves against them: not checked."""
    if ref == "#" or any(key == "$id" for key in _keys_below(root)):
        return True
    if not ref.startswith("#/"):
        return ref[1:] in _anchors(root)
    node: Any = root
    for raw in ref[2:].split("/"):
        part = urllib.parse.unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return isinstance(node, (dict, bool))


def _keys_below(root: dict[str, Any]) -> Iterator[str]:
    """The keys of every object nested inside ``root`` (not its own)."""
    stack: list[Any] = list(root.values())
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield from node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _anchors(node: Any) -> set[str]:
    found: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("$anchor"), str):
                found.add(item["$anchor"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _resolve(root: dict[str, Any], ref: str) -> dict[str, Any]:
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    if not isinstance(node, dict):
        raise ValueError(f"$ref {ref!r} does not point at a schema object")
    return node


def _ensure_strict(node: Any, root: dict[str, Any]) -> dict[str, Any]:
    """The SDK's ``_ensure_strict_json_schema``, rule for rule (it mutates ``node``, a copy)."""
    if not isinstance(node, dict):
        raise TypeError(f"expected a schema object, got {node!r}")
    for defs in ("$defs", "definitions"):
        if isinstance(node.get(defs), dict):
            for sub in node[defs].values():
                _ensure_strict(sub, root)
    if node.get("type") == "object" and "additionalProperties" not in node:
        node["additionalProperties"] = False
    properties = node.get("properties")
    if isinstance(properties, dict):
        node["required"] = list(properties)
        node["properties"] = {key: _ensure_strict(sub, root) for key, sub in properties.items()}
    if isinstance(node.get("items"), dict):
        node["items"] = _ensure_strict(node["items"], root)
    if isinstance(node.get("anyOf"), list):
        node["anyOf"] = [_ensure_strict(sub, root) for sub in node["anyOf"]]
    all_of = node.get("allOf")
    if isinstance(all_of, list):
        if len(all_of) == 1:
            node.update(_ensure_strict(all_of[0], root))
            node.pop("allOf")
        else:
            node["allOf"] = [_ensure_strict(sub, root) for sub in all_of]
    if "default" in node and node["default"] is None:
        node.pop("default")
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1:
        resolved = _resolve(root, ref)
        node.update({**resolved, **node})
        node.pop("$ref")
        return _ensure_strict(node, root)
    return node


def _strict_ok(node: Any) -> bool:
    """Whether a schema made strict stays inside what OpenAI's strict mode accepts."""
    if isinstance(node, list):
        return all(_strict_ok(sub) for sub in node)
    if not isinstance(node, dict):
        return True
    if _NOT_STRICT & node.keys():
        return False
    if "additionalProperties" in node and node["additionalProperties"] is not False:
        return False
    if node.get("type") == "object" and "properties" not in node and "$ref" not in node:
        return False  # a free-form object: strict mode needs its properties named
    for key, value in node.items():
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
            if not all(_strict_ok(sub) for sub in value.values()):  # their keys are names, not keywords
                return False
        elif key not in ("enum", "const", "default", "examples") and not _strict_ok(value):
            return False
    return True
