"""Feedback for long commands: stage lines (``tinykit: resolving llama``) and step counters.

The API logs each stage to the ``tinykit._progress`` logger at INFO; without a handler nothing
shows (logging's last resort prints warnings only). The CLI attaches one writing to stderr, so
stdout keeps the result and ``--json`` stays parseable.

Sweeps and batch builds count their items with ``steps``::

    with progress.steps(len(names), "fixtures") as step:
        for name in names:
            step(name)      # item n of N starts
            build(name)

On a terminal (stderr is a TTY and the CLI shows stages) that is a rich progress bar, which
the stage lines of each item scroll above; otherwise one plain stage line per item,
``tinykit: [3/7] fixtures: tiny-llama ...``, which logs and CI keep. rich is imported only
when a bar is drawn, so ``import tinykit`` stays light.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator

LOGGER = logging.getLogger("tinykit._progress")


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


def _bar_wanted() -> bool:
    """A bar only where a person watches: stages are shown, and on a terminal."""
    shown = LOGGER.isEnabledFor(logging.INFO) and bool(LOGGER.handlers)
    return shown and sys.stderr.isatty()


@contextlib.contextmanager
def steps(total: int, label: str) -> Iterator[Callable[[str], None]]:
    """Count ``total`` items of ``label``: yields ``step(name)``, called as each item starts."""
    if not _bar_wanted():
        done = 0

        def line(name: str) -> None:
            nonlocal done
            done += 1
            stage(f"[{done}/{total}] {label}: {name} ...")

        yield line
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("tinykit: {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[item]}"),
    )
    # stderr: stdout keeps the result; the stage lines written meanwhile scroll above the bar
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as bar:
        task = bar.add_task(label, total=total, item="")
        started = 0

        def advance(name: str) -> None:
            nonlocal started
            bar.update(task, completed=started, item=name)
            started += 1

        yield advance
        bar.update(task, completed=total, item="")
