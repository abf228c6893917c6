"""The error tree is the one source of statuses: what the server answers for each class and what the client
raises for that answer agree, class by class (no Redis, no worker: pure functions)."""

from __future__ import annotations

import json

import pytest

from agents_celery import errors
from agents_celery.client.plans import error_from_response
from agents_celery.errors import (
    LOCAL,
    AgentsCeleryError,
    APIError,
    ConnectionLostError,
    RunTimeoutError,
    by_status,
    reply_class,
)
from agents_celery.http.messages import error_reply, status_of

#: Every class of the tree, parents first.
TREE = errors._tree()

#: The statuses the server answered before each class carried its own (the old most-specific-first table).
BEFORE = (
    (errors.AuthenticationError, 401),
    (errors.ForbiddenError, 403),
    (errors.PayloadTooLargeError, 413),
    (errors.BadRequestError, 400),
    (errors.DecisionError, 400),
    (errors.ValidationError, 422),
    (errors.NotFoundError, 404),
    (errors.RunExpiredError, 410),
    (errors.StateError, 409),
    (errors.RedisUnavailableError, 503),
)


def instance(cls: type[AgentsCeleryError], message: str) -> AgentsCeleryError:
    """An instance of ``cls``, with the extra arguments its constructor wants."""
    if cls is RunTimeoutError:
        return cls(message, "run-1")
    if cls is ConnectionLostError:
        return cls(message, "run-1", 3)
    if issubclass(cls, APIError):
        return cls(message, 502)
    return cls(message)


def test_the_walk_sees_the_whole_tree() -> None:
    """Every exception class defined in agents_celery.errors is walked (none is left out of the registries)."""
    defined = {v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, AgentsCeleryError)}
    assert set(TREE) == defined and len(TREE) == len(defined) > 30


@pytest.mark.parametrize("cls", TREE, ids=lambda c: c.__name__)
def test_server_status_and_client_class_agree(cls: type[AgentsCeleryError]) -> None:
    """Round trip: the server's error_reply of an instance, read back by the client, is the same class (APIError
    for the root and for the classes the caller's own side raises), with the same message; the status is the one
    the old table gave, and a reply that lost its code still maps to a class catching ``cls``."""
    exc = instance(cls, f"because {cls.__name__}")
    reply = error_reply(exc)
    assert reply.status == status_of(exc) == cls.status
    assert reply.status == next((s for c, s in BEFORE if isinstance(exc, c)), 500)
    assert reply.body == {"detail": str(exc), "code": cls.code}

    back = error_from_response(reply.status, json.dumps(reply.body).encode())
    expected = APIError if cls in LOCAL or cls is AgentsCeleryError else cls  # the root names no class
    assert type(back) is expected and str(back) == str(exc)
    if isinstance(back, APIError):
        assert back.status == reply.status

    codeless = error_from_response(reply.status, json.dumps({"detail": "x"}).encode())
    if cls.status == 500 or cls in LOCAL:
        assert type(codeless) is APIError
    else:
        assert issubclass(cls, type(codeless)) and type(codeless) is by_status()[cls.status]


def test_each_code_names_one_class() -> None:
    codes = [cls.code for cls in TREE]
    assert len(codes) == len(set(codes))


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, errors.ValidationError),
        (401, errors.AuthenticationError),
        (403, errors.ForbiddenError),
        (404, errors.NotFoundError),
        (409, errors.StateError),
        (410, errors.RunExpiredError),
        (413, errors.PayloadTooLargeError),
        (422, errors.ValidationError),
        (503, errors.RedisUnavailableError),
        (500, APIError),
        (502, APIError),
    ],
)
def test_a_reply_without_a_known_code_falls_back_on_its_status(status: int, cls: type[AgentsCeleryError]) -> None:
    """A code the client does not know (a proxy, a newer server) or none: the most general class of the status."""
    assert reply_class("from_a_newer_server", status) is cls
    assert reply_class(None, status) is cls
    error = error_from_response(status, b"<html>bad gateway</html>")
    assert type(error) is cls and "bad gateway" in str(error)
