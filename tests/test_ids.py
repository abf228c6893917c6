"""ids: random ids and the process id without a system call each, unique across forks and user seeding."""

from __future__ import annotations

import os
import random
import uuid

from agents_celery.ids import pid, random_hex, random_uuid


def test_ids_look_like_the_uuid4_ones_they_replace() -> None:
    hexes = {random_hex() for _ in range(10_000)}
    assert len(hexes) == 10_000 and all(len(h) == 32 and int(h, 16) >= 0 for h in hexes)
    for _ in range(100):
        text = random_uuid()
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_user_code_seeding_the_global_generator_does_not_repeat_them() -> None:
    random.seed(0)
    first = random_hex()
    random.seed(0)
    assert random_hex() != first


def test_a_forked_child_has_its_own_ids_and_pid() -> None:
    assert pid() == os.getpid()
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.write(writer, f"{random_hex()} {pid()} {os.getpid()}".encode())
        finally:
            os._exit(0)
    os.close(writer)
    theirs, their_pid, their_real_pid = os.read(reader, 200).decode().split()
    os.waitpid(child, 0)
    os.close(reader)
    assert random_hex() != theirs  # without a reseed the child would draw the parent's next id
    assert int(their_pid) == int(their_real_pid) == child and pid() == os.getpid()
