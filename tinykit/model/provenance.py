"""Provenance written beside every build: the model card (README.md) and the manifest (tinykit.json).

Both hold only what makes the build reproducible (command, versions, source revision, spec,
seed, file hashes) and nothing that changes between two identical builds (no times, no paths).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinykit import __version__

if TYPE_CHECKING:
    from tinykit.model.build import BuildResult
    from tinykit.model.spec import ShrinkSpec
    from tinykit.source import Source

MANIFEST = "tinykit.json"
VERSIONED = ("transformers", "torch", "tokenizers", "safetensors", "huggingface_hub")


def versions() -> dict[str, str]:
    from tinykit.artifacts.cache import package_versions

    return {"tinykit": __version__, **package_versions(VERSIONED)}


def rebuild_command(src: Source, spec: ShrinkSpec, recipes: tuple[str, ...] = ()) -> str:
    """The CLI call that rebuilds this artifact (options that differ from the defaults only)."""
    from tinykit.model.spec import ShrinkSpec

    default = ShrinkSpec()
    parts = ["tinykit", "make-tiny", src.name]
    if src.kind == "hub":
        parts += ["--revision", src.revision]
    for name, value in spec.to_dict().items():
        if value != getattr(default, name):
            parts += [f"--{name.replace('_', '-')}", str(value)]
    parts += [x for r in recipes for x in ("--recipe", r)]
    return " ".join(parts)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_table(folder: Path) -> dict[str, dict[str, Any]]:
    return {
        p.name: {"bytes": p.stat().st_size, "sha256": sha256(p)}
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def write(
    folder: Path, src: Source, spec: ShrinkSpec, result: BuildResult, recipes: tuple[str, ...]
) -> None:
    command = rebuild_command(src, spec, recipes)
    (folder / "README.md").write_text(_card(src, spec, result, command))
    manifest = {
        "command": command,
        "source": {
            "kind": src.kind,
            "name": src.name,
            "revision": src.revision,
            "model_type": src.model_type,
        },
        "spec": spec.to_dict(),
        "seed": spec.seed,
        "versions": versions(),
        "model_class": result.model_class,
        "params": result.params,
        "layers_kept": result.layers,
        "files": {name: info["sha256"] for name, info in file_table(folder).items()},
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def _card(src: Source, spec: ShrinkSpec, result: BuildResult, command: str) -> str:
    base = f"base_model: {src.name.split('@')[0]}\n" if src.kind == "hub" else ""
    layers = "\n".join(f"- `{path}`: source layers {kept}" for path, kept in result.layers.items())
    return (
        "---\n"
        "library_name: transformers\n"
        f"{base}"
        "tags:\n- tinykit\n- tiny\n- random-weights\n- testing\n"
        "---\n\n"
        f"# Tiny random {result.model_class} ({src.model_type})\n\n"
        f"A {result.params:,}-parameter model with **random weights** for fast tests, built by tinykit "
        f"{__version__} from `{src.name}` (revision `{src.revision}`). Its outputs mean nothing: use it to "
        "test code paths, not quality.\n\n"
        f"Rebuild it byte for byte (same package versions, see `{MANIFEST}`):\n\n"
        f"```\n{command}\n```\n\n"
        f"Spec: `{json.dumps(spec.to_dict(), sort_keys=True)}`\n\n"
        f"Layers kept (one of every block type of the source):\n\n{layers or '- (no layer stack)'}\n"
    )
