"""Memory: peaks of host and accelerator memory, budgets, leak checks, CUDA history, projections.

`track_memory` (tinykit.memory.track) measures a block; `project_memory`
(tinykit.memory.project) sizes a full-depth model from 1-2 layer builds; `memory_history`
(tinykit.memory.history) records bounded CUDA allocation history and per-rank snapshots.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "track_memory": "tinykit.memory.track",
    "MemoryReport": "tinykit.memory.track",
    "MemoryBudgetExceeded": "tinykit.errors",
    "parse_size": "tinykit.memory.sizes",
    "format_bytes": "tinykit.memory.sizes",
    "project_memory": "tinykit.memory.project",
    "memory_history": "tinykit.memory.history",
    "dump_snapshot": "tinykit.memory.history",
    "run_command": "tinykit.memory.run",
    "check_leaks": "tinykit.memory.leaks",
    "MemoryLeakDetected": "tinykit.errors",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tinykit.memory' has no attribute {name!r}")
