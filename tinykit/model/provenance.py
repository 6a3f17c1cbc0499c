"""Provenance written beside every build: the model card (README.md) and the manifest (tinykit.json).

Both hold only what makes the build reproducible (command, versions, source revision, spec,
seed, file hashes) and nothing that changes between two identical builds (no times, no paths).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinykit._files import sha256_file
from tinykit._versions import MANIFEST as MANIFEST_PACKAGES
from tinykit._versions import __version__, package_versions

if TYPE_CHECKING:
    from tinykit.model.build import Built
    from tinykit.model.spec import ShrinkSpec
    from tinykit.source import Source

MANIFEST = "tinykit.json"


def versions() -> dict[str, str]:
    return package_versions(MANIFEST_PACKAGES)


def rebuild_command(
    src: Source,
    spec: ShrinkSpec,
    recipes: tuple[str, ...] = (),
    options: dict[str, Any] | None = None,
) -> str:
    """The CLI call that rebuilds this artifact (options that differ from the defaults only).

    A preset stands for its sizes, so only the sizes it does not give are spelled out."""
    from tinykit.model.choices import BuildChoices
    from tinykit.model.recipes import preset

    choices = BuildChoices(
        **{k: v for k, v in (options or {}).items() if k in BuildChoices.__dataclass_fields__}
    )
    parts = ["tinykit", "make-tiny", src.name]
    if src.origin == "hub":
        parts += ["--revision", src.revision]
    preset_sizes = preset(choices.preset) if choices.preset else {}
    defaults = type(spec)().to_dict()
    for name, value in spec.to_dict().items():
        if value != preset_sizes.get(name, defaults[name]):
            parts += [f"--{name.replace('_', '-')}", str(value)]
    parts += choices.flags()
    parts += [x for r in recipes for x in ("--recipe", r)]
    return " ".join(shlex.quote(p) for p in parts)


def file_table(folder: Path) -> dict[str, dict[str, Any]]:
    return {
        p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def write(
    folder: Path, src: Source, spec: ShrinkSpec, result: Built, recipes: tuple[str, ...]
) -> None:
    command = rebuild_command(src, spec, recipes, result.options)
    (folder / "README.md").write_text(_card(src, spec, result, command))
    manifest = {
        "command": command,
        "source": {
            "kind": src.origin,
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
    if result.options:  # only when set, so a build without them keeps its bytes
        manifest["options"] = result.options
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def read_manifest(folder: Path) -> dict[str, Any] | None:
    path = folder / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def _card(src: Source, spec: ShrinkSpec, result: Built, command: str) -> str:
    base = f"base_model: {src.name.split('@')[0]}\n" if src.origin == "hub" else ""
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
        + (f"Options: `{json.dumps(result.options, sort_keys=True)}`\n\n" if result.options else "")
        + f"Layers kept (one of every block type of the source):\n\n{layers or '- (no layer stack)'}\n"
    )
