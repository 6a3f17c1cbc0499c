"""Where recipes/*.toml are and how they are read: one parse per file, shared by every floor.

The shrink rules (`tinykit.model.recipes`) read each family file's size tables; the tokenizer
builder (`tinykit.tokenizer.family`) reads its `[tokenizer]` table. Both see the same files,
`--recipe` extras last, so one file describes a family for both.
"""

from __future__ import annotations

import tomllib
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from tinykit.errors import UsageError


def recipes_dir() -> Path:
    """recipes/ ships inside the wheel as tinykit/recipes; a source checkout has it at the top."""
    packaged = resources.files("tinykit").joinpath("recipes")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[1] / "recipes"


def read_recipe(path: Path) -> dict[str, Any]:
    """One recipe file as a dict; a file that does not parse is a one-line UsageError."""
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"cannot read recipe {path}: {e}. Fix the file or drop --recipe.") from e


@lru_cache(maxsize=8)
def load_recipes(extra: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[tuple[str, dict]]]:
    """(the generic file, [(name, data) of every family file, then each extra file]).

    Callers must not mutate what they get: the result is cached."""
    folder = recipes_dir()
    generic = read_recipe(folder / "_generic.toml")
    families = [
        (p.name, read_recipe(p))
        for p in sorted(folder.glob("*.toml"))
        if not p.name.startswith("_")
    ]
    for path in extra:
        data = read_recipe(Path(path))
        if "model_types" not in data:
            raise UsageError(
                f'recipe {path} has no `model_types` list. Add e.g. model_types = ["llama"].'
            )
        families.append((path, data))
    return generic, families


def family_tables(model_type: str, extra: tuple[str, ...] = ()) -> list[tuple[str, dict]]:
    """(name, data) of every family file that lists `model_type`, in merge order."""
    _, families = load_recipes(tuple(extra))
    return [(name, data) for name, data in families if model_type in data.get("model_types", ())]
