"""tinykit's version, and which package versions matter where.

The model manifest (``MANIFEST``), the tensor-snapshot file name (``SNAPSHOT``) and the
environment diff's "most relevant first" list (``ENV``) read their sets from here; an artifact
kind's set (its cache key and fixture lock) is its ``Kind.versions`` (``tinykit.artifacts.kinds``).
Versions are read from package metadata, so nothing heavy is imported.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable
from importlib import metadata

__version__ = "0.1.0"

# Recorded in a tiny model's tinykit.json: what rebuilds it byte for byte, plus the Hub client.
MANIFEST = ("tinykit", "transformers", "torch", "tokenizers", "safetensors", "huggingface_hub")
# In a tensor snapshot's file name: goldens are kept per numerics stack.
SNAPSHOT = ("torch", "transformers")
# Version changes here explain most "it changed after the upgrade" reports; env.diff lists them first.
ENV = (
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "huggingface-hub",
    "datasets",
    "accelerate",
    "numpy",
    "peft",
    "trl",
    "deepspeed",
    "triton",
    "flash-attn",
    "xformers",
    "sentencepiece",
    "bitsandbytes",
    "vllm",
    "tinykit",
)


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """``{name: installed version}`` (``"absent"`` when not installed), in the order given.

    tinykit's own is this module's ``__version__``: the installed metadata may belong to
    another checkout than the code that runs.
    """
    versions = {}
    for name in names:
        if name == "tinykit":
            versions[name] = __version__
            continue
        try:
            versions[name] = _version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def _version(name: str) -> str:
    # A package whose code this process already runs keeps that version here whatever is
    # installed since, so it is read once (a metadata read scans sys.path: ~1.5 ms a package,
    # 8 ms a model build); one not imported yet is read as installed now.
    if name.replace("-", "_") in sys.modules:
        return _loaded_version(name)
    return metadata.version(name)


@functools.cache
def _loaded_version(name: str) -> str:
    return metadata.version(name)
