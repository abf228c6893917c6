"""Random ids and this process's id, without a system call each time.

``uuid.uuid4()`` reads 16 bytes from the kernel (``getrandom``) and ``os.getpid()`` asks the kernel too; a
durable step made about five of the first and several of the second (lease token, state version, the next
step's task id and delivery tag, message ids; fork checks). On a VM with page-table isolation each system
call also leaves the CPU's caches cold for the Python code that follows, so they cost far more than their
own microseconds. Here ids come from a generator of this module's own (``random.Random``, seeded from
``os.urandom``; never the global one, which user code may seed to a fixed value), reseeded in a forked child
together with the cached process id. They need to be unique, not secret: a lease token fences off a stale
writer, it does not authenticate anyone.
"""

from __future__ import annotations

import os
import random
import uuid

_RANDOM = random.Random()
_PID = os.getpid()


def _forked() -> None:
    global _PID
    _PID = os.getpid()
    _RANDOM.seed()  # from os.urandom: a child never repeats its parent's ids


os.register_at_fork(after_in_child=_forked)


def pid() -> int:
    """This process's id (kept up to date across forks)."""
    return _PID


def random_hex() -> str:
    """32 random hex digits (128 bits), as ``uuid.uuid4().hex`` gives but not a UUID."""
    return f"{_RANDOM.getrandbits(128):032x}"


def random_uuid() -> str:
    """A random (version 4) UUID in its canonical string form, as ``str(uuid.uuid4())``."""
    return str(uuid.UUID(int=_RANDOM.getrandbits(128), version=4))
