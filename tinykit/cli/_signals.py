"""SIGTERM runs the same cleanup as Ctrl-C: the signal becomes a KeyboardInterrupt, so every
`finally` and context manager on the way out (temp folders, servers) runs as it does for SIGINT.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be: the same `finally` blocks run on the way out."""


def _interrupt(signum: int, frame: object) -> None:
    raise Terminated(f"signal {signum}")


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """While the block runs, SIGTERM raises KeyboardInterrupt in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
