"""The warm-up of a measured block: what the modules it imported for the first time took.

A test that builds a transformers model imports its modeling code (and, through it, parts of
torch) the first time one runs in the process: +190 MB for a 0.4 MB model. Whether that happens
inside the test depends on which tests ran before it on the same worker, so a host budget that
counted it would pass or fail with the test order. `ImportMeter` measures the RSS each outermost
first-time import adds while the block runs (`tinykit._import_hooks`); `track_memory` reports it
as `import_bytes` and holds the host budget against the peak less that (`host_peak_own`).
"""

from __future__ import annotations

import os
from collections import Counter

from tinykit._import_hooks import ImportWatch
from tinykit.memory.sampler import rss_of

__all__ = ["ImportMeter"]


class ImportMeter:
    """While started, adds up the RSS growth of each outermost first-time import."""

    def __init__(self) -> None:
        self.bytes = 0
        self.by_module: Counter[str] = Counter()
        self._start = 0
        self._watch = ImportWatch(before=self._before, after=self._after)

    def start(self) -> ImportMeter:
        self._watch.install()
        return self

    def stop(self) -> None:
        self._watch.remove()

    def _before(self, name: str) -> None:
        if self._watch.depth == 1:  # an outermost import: what it imports is part of it
            self._start = rss_of(os.getpid())

    def _after(self, name: str) -> None:
        if self._watch.depth == 1:
            grew = max(0, rss_of(os.getpid()) - self._start)
            self.bytes += grew
            self.by_module[name] += grew

    def top(self, n: int = 5) -> list[tuple[str, int]]:
        return [(m, b) for m, b in self.by_module.most_common(n) if b]
