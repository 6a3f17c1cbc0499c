"""Stage lines for long commands (``tinykit: resolving llama``), so 10-40 s are not silent.

The API logs each stage to the ``tinykit.progress`` logger at INFO; without a handler nothing
shows (logging's last resort prints warnings only). The CLI attaches one writing to stderr, so
stdout keeps the result and ``--json`` stays parseable.
"""

from __future__ import annotations

import logging
import sys

LOGGER = logging.getLogger("tinykit.progress")


def stage(message: str) -> None:
    LOGGER.info(message)


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is at each line (a captured or replaced stream too)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def to_stderr() -> None:
    """Print stages on stderr as ``tinykit: <stage>`` (the CLI's choice; libraries keep quiet)."""
    if not LOGGER.handlers:
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("tinykit: %(message)s"))
        LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False
