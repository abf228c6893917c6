"""Child processes the demo starts (workers, a private Redis); the tests and benches use the same helper."""

from __future__ import annotations

import signal
import subprocess


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """Ask ``proc`` to stop (SIGTERM, after a SIGCONT in case it was paused); kill it if it has not within
    ``timeout`` seconds. Nothing happens when it already exited."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGCONT)
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
