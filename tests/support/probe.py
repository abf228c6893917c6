"""A module the zygote's test runs as ``python -m tests.support.probe``: prints what a process started that way
sees (its pid, an environment variable, the start of its path), then waits for a signal if asked to."""

import os
import signal
import sys

print(f"pid={os.getpid()} probe={os.environ.get('PROBE')} path={sys.path[1]}", flush=True)
if sys.argv[1:] == ["wait"]:
    signal.pause()
sys.exit(3)
