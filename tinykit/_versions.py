"""tinykit's version, and the one table of which package versions matter where.

Every place that records or keys on package versions reads its set from here: the artifact
cache key and the fixture lock (``ARTIFACT_KEYS``, per artifact kind), the model manifest
(``MANIFEST``), the tensor-snapshot file name (``SNAPSHOT``) and the environment diff's
"most relevant first" list (``ENV``). Versions are read from package metadata, so nothing
heavy is imported.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata

__version__ = "0.1.0"

# Packages whose versions decide the bytes of a built artifact, per kind. Datasets are written
# by datasets/pyarrow with media re-encoded by pillow/soundfile; synthetic rows are drawn by
# hypothesis, so an upgrade of any of these must not serve a stale cached or locked artifact.
_TOKENIZER = ("tinykit", "transformers", "tokenizers", "sentencepiece", "protobuf")
_DATASET = ("tinykit", "datasets", "pyarrow", "pillow", "soundfile")
ARTIFACT_KEYS: dict[str, tuple[str, ...]] = {
    "model": (*_TOKENIZER, "torch", "safetensors"),
    "tokenizer": _TOKENIZER,
    "dataset": _DATASET,
    "synthetic_dataset": (*_DATASET, "hypothesis", "numpy"),
}
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
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def artifact_versions(kind: str) -> dict[str, str]:
    """The versions that key an artifact of ``kind`` (one of ``ARTIFACT_KEYS``)."""
    return package_versions(ARTIFACT_KEYS[kind])
