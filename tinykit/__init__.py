"""tinykit: tiny random Hub models, tokenizers and datasets, and reproducibility tools for ML tests.

Importing tinykit is cheap: the public functions are loaded on first use (PEP 562), so
`import tinykit` never imports torch, transformers or datasets.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tinykit._versions import __version__

# public name -> module that defines it
_LAZY = {
    "HubServer": "tinykit.standins.serve",  # the loopback Hub, plus add_manifest
    "build_standins": "tinykit.standins.build",
    "NumericsError": "tinykit.errors",
    "describe": "tinykit.numerics.describe",
    "detect_anomalies": "tinykit.numerics.anomaly",
    "diff_dumps": "tinykit.numerics.diff",
    "full_precision": "tinykit.numerics.describe",
    "one_line_repr": "tinykit.numerics.describe",
    "record": "tinykit.numerics.record",
    "check_determinism": "tinykit.numerics.determinism",
    "fixture_path": "tinykit.artifacts.lookup",
    "make_synthetic_dataset": "tinykit.dataset.synthetic",
    "make_tiny": "tinykit.model.build",
    "make_tiny_dataset": "tinykit.dataset.build",
    "make_tiny_tokenizer": "tinykit.tokenizer.build",
    "check_leaks": "tinykit.memory.leaks",
    "project_memory": "tinykit.memory.project",
    "track_memory": "tinykit.memory.track",
    "run_distributed": "tinykit.distributed.launch",
    "seed_everything": "tinykit.repro.seed",
    "slice_model": "tinykit.slice.build",
    "verify": "tinykit.model.verify",
    "ShrinkSpec": "tinykit.model.spec",
}

# public submodules reachable as attributes: tinykit.env.capture(), tinykit.seed.dataloader_kwargs()
_MODULES = {
    "env": "tinykit.repro.env",
    "errors": "tinykit.errors",
    "memory": "tinykit.memory",
    "seed": "tinykit.repro.seed",
}

__all__ = [  # every name of _LAZY and _MODULES (tests/test_import_is_light.py checks they load)
    "HubServer",
    "NumericsError",
    "ShrinkSpec",
    "__version__",
    "build_standins",
    "check_determinism",
    "check_leaks",
    "describe",
    "detect_anomalies",
    "diff_dumps",
    "env",
    "errors",
    "fixture_path",
    "full_precision",
    "make_synthetic_dataset",
    "make_tiny",
    "make_tiny_dataset",
    "make_tiny_tokenizer",
    "memory",
    "project_memory",
    "one_line_repr",
    "record",
    "run_distributed",
    "seed",
    "seed_everything",
    "slice_model",
    "track_memory",
    "verify",
]

if TYPE_CHECKING:
    from tinykit import errors, memory
    from tinykit.artifacts.lookup import fixture_path
    from tinykit.dataset.build import make_tiny_dataset
    from tinykit.dataset.synthetic import make_synthetic_dataset
    from tinykit.distributed.launch import run_distributed
    from tinykit.errors import NumericsError
    from tinykit.memory.leaks import check_leaks
    from tinykit.memory.project import project_memory
    from tinykit.memory.track import track_memory
    from tinykit.model.build import make_tiny
    from tinykit.model.spec import ShrinkSpec
    from tinykit.model.verify import verify
    from tinykit.numerics.anomaly import detect_anomalies
    from tinykit.numerics.describe import describe, full_precision, one_line_repr
    from tinykit.numerics.determinism import check_determinism
    from tinykit.numerics.diff import diff_dumps
    from tinykit.numerics.record import record
    from tinykit.repro import env, seed
    from tinykit.repro.seed import seed_everything
    from tinykit.slice.build import slice_model
    from tinykit.standins.build import build_standins
    from tinykit.standins.serve import HubServer
    from tinykit.tokenizer.build import make_tiny_tokenizer


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _MODULES:
        return importlib.import_module(_MODULES[name])
    raise AttributeError(f"module 'tinykit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
