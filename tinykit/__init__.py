"""tinykit: tiny random Hub models, tokenizers and datasets, and reproducibility tools for ML tests.

Importing tinykit is cheap: the public functions are loaded on first use (PEP 562), so
`import tinykit` never imports torch, transformers or datasets.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tinykit._versions import __version__ as __version__

# public name -> module that defines it
_LAZY = {
    "HubServer": "tinykit.standins.serve",  # the loopback Hub, plus add_manifest
    "NumericsError": "tinykit.errors",
    "ShrinkSpec": "tinykit.model.spec",
    "build_standins": "tinykit.standins.build",
    "check_determinism": "tinykit.numerics.determinism",
    "check_leaks": "tinykit.memory.leaks",
    "describe": "tinykit.numerics.describe",
    "detect_anomalies": "tinykit.numerics.anomaly",
    "diff_dumps": "tinykit.numerics.diff",
    "fixture_path": "tinykit.artifacts.lookup",
    "full_precision": "tinykit.numerics.describe",
    "make_synthetic_dataset": "tinykit.dataset.synthetic",
    "make_tiny": "tinykit.model.build",
    "make_tiny_dataset": "tinykit.dataset.build",
    "make_tiny_tokenizer": "tinykit.tokenizer.build",
    "one_line_repr": "tinykit.numerics.describe",
    "probe": "tinykit.numerics.recorder",
    "project_memory": "tinykit.memory.project",
    "record": "tinykit.numerics.record",
    "run_distributed": "tinykit.distributed.launch",
    "seed_everything": "tinykit.repro.seed",
    "slice_model": "tinykit.slice.build",
    "track_memory": "tinykit.memory.track",
    "verify": "tinykit.model.verify",
}

# public submodules reachable as attributes: tinykit.env.capture(), tinykit.seed.dataloader_kwargs()
_MODULES = {
    "env": "tinykit.repro.env",
    "errors": "tinykit.errors",
    "memory": "tinykit.memory",
    "seed": "tinykit.repro.seed",
}

# the face: every lazy name and public submodule (tests/test_import_is_light.py loads each)
__all__ = sorted([*_LAZY, *_MODULES, "__version__"])

if TYPE_CHECKING:  # `as`: a re-export for type checkers (__all__ is computed, they cannot read it)
    from tinykit import errors as errors
    from tinykit import memory as memory
    from tinykit.artifacts.lookup import fixture_path as fixture_path
    from tinykit.dataset.build import make_tiny_dataset as make_tiny_dataset
    from tinykit.dataset.synthetic import make_synthetic_dataset as make_synthetic_dataset
    from tinykit.distributed.launch import run_distributed as run_distributed
    from tinykit.errors import NumericsError as NumericsError
    from tinykit.memory.leaks import check_leaks as check_leaks
    from tinykit.memory.project import project_memory as project_memory
    from tinykit.memory.track import track_memory as track_memory
    from tinykit.model.build import make_tiny as make_tiny
    from tinykit.model.spec import ShrinkSpec as ShrinkSpec
    from tinykit.model.verify import verify as verify
    from tinykit.numerics.anomaly import detect_anomalies as detect_anomalies
    from tinykit.numerics.describe import describe as describe
    from tinykit.numerics.describe import full_precision as full_precision
    from tinykit.numerics.describe import one_line_repr as one_line_repr
    from tinykit.numerics.determinism import check_determinism as check_determinism
    from tinykit.numerics.diff import diff_dumps as diff_dumps
    from tinykit.numerics.record import record as record
    from tinykit.numerics.recorder import probe as probe
    from tinykit.repro import env as env
    from tinykit.repro import seed as seed
    from tinykit.repro.seed import seed_everything as seed_everything
    from tinykit.slice.build import slice_model as slice_model
    from tinykit.standins.build import build_standins as build_standins
    from tinykit.standins.serve import HubServer as HubServer
    from tinykit.tokenizer.build import make_tiny_tokenizer as make_tiny_tokenizer


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
