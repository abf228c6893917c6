"""A2A 0.3's JSON-RPC spelling, translated to and from 1.0's at the edge. No I/O here.

A1.0 server accepts 0.3's method names when the request's ``A2A-Version`` header is empty, or names 0.3 (the SDK's
0.3 transport sends ``0.3``): ``message/send``, ``message/stream``, ``tasks/get``, ``tasks/cancel``,
``tasks/resubscribe`` and ``tasks/pushNotificationConfig/*``. The request's params are rewritten into 1.0's shape
(:func:`params`) and everything it answers back into 0.3's (:func:`result`, :func:`stream_result`): objects carry
their ``kind``, states and roles are lower-case words (``input-required``, ``agent``), parts are
``{"kind": "text", "text"}`` / ``{"kind": "data", "data"}``, and a status update says whether it is ``final``.
"""

from __future__ import annotations

from typing import Any

from . import wire

#: 0.3 method -> 1.0 method.
METHODS = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
}


def speaks_0_3(version: str | None) -> bool:
    """Whether a request's ``A2A-Version`` header lets it use 0.3's names (empty, or a 0.x version)."""
    return not (version or "").strip() or (version or "").strip().startswith("0.")


# -- in: 0.3 params -> 1.0 --------------------------------------------------------------------------------


def params(method: str, given: dict[str, Any] | None) -> dict[str, Any] | None:
    """The params of a 0.3 request (``method`` its 1.0 name now) in 1.0's shape."""
    if given is None:
        return given
    if method == "CreateTaskPushNotificationConfig":
        return {"taskId": given.get("taskId"), **_push_in(given.get("pushNotificationConfig"))}
    if method in (
        "GetTaskPushNotificationConfig",
        "DeleteTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
    ):
        return {"taskId": given.get("id"), "id": given.get("pushNotificationConfigId")}
    if method not in ("SendMessage", "SendStreamingMessage"):
        return given
    out = dict(given)
    message = given.get("message")
    if isinstance(message, dict):
        out["message"] = _message_in(message)
    config = given.get("configuration")
    if isinstance(config, dict):
        config = dict(config)
        if config.get("blocking") is False:
            config["returnImmediately"] = True
        if isinstance(config.get("pushNotificationConfig"), dict):
            config["taskPushNotificationConfig"] = _push_in(config.pop("pushNotificationConfig"))
        out["configuration"] = config
    return out


def _push_in(config: Any) -> dict[str, Any]:
    """0.3's ``PushNotificationConfig`` (``authentication.schemes``, a list) as 1.0's fields."""
    if not isinstance(config, dict):
        return {}
    out: dict[str, Any] = {k: config.get(k) for k in ("id", "url", "token") if config.get(k) is not None}
    auth = config.get("authentication")
    if isinstance(auth, dict) and auth.get("schemes"):
        out["authentication"] = {"scheme": auth["schemes"][0], "credentials": auth.get("credentials")}
    return out


def _message_in(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    out = {**message, "role": {"user": "ROLE_USER", "agent": "ROLE_AGENT"}.get(str(role), role)}
    parts = message.get("parts")
    if isinstance(parts, list):
        out["parts"] = [_part_in(p) for p in parts]
    return out


def _part_in(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    kind = part.get("kind")
    if kind == "text":
        return {"text": part.get("text")}
    if kind == "data":
        return {"data": part.get("data")}
    if kind == "file":
        file = part.get("file") or {}
        return {"url": file.get("uri")} if file.get("uri") else {"raw": file.get("bytes")}
    return part


# -- out: 1.0 results -> 0.3 ------------------------------------------------------------------------------


def result(method: str, value: Any) -> Any:
    """A 1.0 method's result as 0.3 answers it (``SendMessage``'s ``{"task"}`` is the Task itself)."""
    if method == "SendMessage" and isinstance(value, dict) and "task" in value:
        return task(value["task"])
    if method in ("GetTask", "CancelTask") and isinstance(value, dict):
        return task(value)
    if method in ("CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig"):
        return _push(value)
    if method == "ListTaskPushNotificationConfigs":
        return [_push(c) for c in value.get("configs", [])]
    if method == "DeleteTaskPushNotificationConfig":
        return None
    return value


def _push(config: dict[str, Any]) -> dict[str, Any]:
    inner: dict[str, Any] = {k: config[k] for k in ("id", "url", "token") if k in config}
    auth = config.get("authentication")
    if auth:
        inner["authentication"] = {"schemes": [auth["scheme"]], "credentials": auth.get("credentials")}
    return {"taskId": config["taskId"], "pushNotificationConfig": inner}


def stream_result(value: dict[str, Any]) -> dict[str, Any]:
    """One ``StreamResponse`` as 0.3's stream event (a Task, a status update, an artifact update)."""
    if "task" in value:
        return task(value["task"])
    if "statusUpdate" in value:
        update = value["statusUpdate"]
        state = update["status"]["state"]
        status = _status(update["status"])
        return {**update, "kind": "status-update", "status": status, "final": state in wire.STREAM_ENDS}
    if "artifactUpdate" in value:
        update = value["artifactUpdate"]
        return {**update, "kind": "artifact-update", "artifact": _artifact(update["artifact"])}
    return value


def task(value: dict[str, Any]) -> dict[str, Any]:
    out = {**value, "kind": "task", "status": _status(value["status"])}
    if "artifacts" in value:
        out["artifacts"] = [_artifact(a) for a in value["artifacts"]]
    if "history" in value:
        out["history"] = [_message(m) for m in value["history"]]
    return out


def _status(value: dict[str, Any]) -> dict[str, Any]:
    state = str(value["state"]).removeprefix("TASK_STATE_").lower().replace("_", "-")
    out = {**value, "state": state}
    if "message" in value:
        out["message"] = _message(value["message"])
    return out


def _message(value: dict[str, Any]) -> dict[str, Any]:
    role = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}.get(value.get("role", ""), "agent")
    return {**value, "kind": "message", "role": role, "parts": [_part(p) for p in value.get("parts", [])]}


def _artifact(value: dict[str, Any]) -> dict[str, Any]:
    return {**value, "parts": [_part(p) for p in value.get("parts", [])]}


def _part(value: dict[str, Any]) -> dict[str, Any]:
    if "text" in value:
        return {"kind": "text", "text": value["text"]}
    data = value.get("data")
    return {"kind": "data", "data": data if isinstance(data, dict) else {"value": data}}
