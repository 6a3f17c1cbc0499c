"""tinykit: tiny random Hub models, tokenizers and datasets, and reproducibility tools for ML tests.

Importing tinykit is cheap: the public functions are loaded on first use (PEP 562), so
`import tinykit` never imports torch, transformers or datasets.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "check_determinism": "tinykit.determinism",
    "make_tiny": "tinykit.shrink.build",
    "seed_everything": "tinykit.seed",
    "verify": "tinykit.shrink.verify",
    "ShrinkSpec": "tinykit.shrink.spec",
}

# public submodules reachable as attributes: tinykit.env.capture(), tinykit.seed.dataloader_kwargs()
_MODULES = ("env", "errors", "seed")

__all__ = sorted([*_LAZY, *_MODULES, "__version__"])

if TYPE_CHECKING:
    from tinykit import env, seed
    from tinykit.determinism import check_determinism
    from tinykit.seed import seed_everything
    from tinykit.shrink.build import make_tiny
    from tinykit.shrink.spec import ShrinkSpec
    from tinykit.shrink.verify import verify


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _MODULES:
        return importlib.import_module(f"tinykit.{name}")
    raise AttributeError(f"module 'tinykit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
