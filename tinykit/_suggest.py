"""Cheap checks of what a user typed, with "did you mean", before any heavy import.

A mistyped model type used to fail after 10-16 s of torch/transformers imports; these checks
read transformers' model-type table as a plain file (never importing transformers) and answer
in well under a second. Names are compared with case and ``-``/``_`` normalised, so ``Llama``
and ``qwen3-moe`` find ``llama`` and ``qwen3_moe``.

The stable API (other commands build on it): ``did_you_mean``, ``hint``, ``check_source``,
``check_folder``, ``known_model_types``, ``known_model_classes`` and ``check_model_class``.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path

from tinykit.errors import UsageError

# The model types transformers knows, as ("name", "NameConfig") pairs in its auto mappings.
_PAIR = re.compile(r"""\(\s*"([\w-]+)",\s*"(\w+Config)"\s*\)|"([\w-]+)":\s*"(\w+Config)\"""")
# The model classes, as ("model_type", "ClassName") pairs in modeling_auto's task mappings.
_CLASS_PAIR = re.compile(r"""\(\s*"[\w-]+",\s*"(\w+)"\s*\)""")


def normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def did_you_mean(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The choices closest to ``name``: an exact match up to case and -/_ first, then similar."""
    by_norm: dict[str, str] = {}
    for choice in choices:
        by_norm.setdefault(normalise(choice), choice)
    if (key := normalise(name)) in by_norm:
        return [by_norm[key]]
    close = difflib.get_close_matches(key, list(by_norm), n=n, cutoff=0.75)
    return [by_norm[c] for c in close]


def hint(name: str, choices: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` or an empty string."""
    found = did_you_mean(name, choices)
    return f" Did you mean {' or '.join(repr(f) for f in found)}?" if found else ""


def _auto_folder() -> Path | None:
    spec = importlib.util.find_spec("transformers")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "models" / "auto"


@functools.cache
def known_model_types() -> frozenset[str] | None:
    """transformers' model types, read from its source files; None when they cannot be read."""
    if (auto := _auto_folder()) is None:
        return None
    names: set[str] = set()
    for file in ("auto_mappings.py", "configuration_auto.py"):
        try:
            text = (auto / file).read_text()
        except OSError:
            continue
        names.update(a or c for a, _, c, _ in _PAIR.findall(text))
    return frozenset(names) if len(names) > 50 else None  # a layout we do not know: no check


@functools.cache
def known_model_classes() -> frozenset[str] | None:
    """The model classes of transformers' auto mappings (``LlamaForCausalLM``, ...), read from
    its source; None when they cannot be read."""
    if (auto := _auto_folder()) is None:
        return None
    try:
        text = (auto / "modeling_auto.py").read_text()
    except OSError:
        return None
    names = frozenset(_CLASS_PAIR.findall(text))
    return names if len(names) > 50 else None


def check_model_class(name: str, where: str = "model class") -> None:
    """Reject a name that is not a transformers model class, with the nearest ones.

    Raises:
        UsageError: ``name`` is not in transformers' auto mappings (``where`` says whose it is).
    """
    classes = known_model_classes()
    if classes is None or name in classes:
        return
    raise UsageError(
        f"{where[:1].upper()}{where[1:]} {name!r} is not a transformers model class."
        + (hint(name, classes) or " Name one such as 'LlamaForCausalLM' (transformers.<Class>).")
    )


def check_source(source: str) -> None:
    """Reject a source that cannot be a folder, a model type or a Hub id, with a suggestion.

    Raises:
        UsageError: a path that does not exist, or an unknown model type.
    """
    path = Path(source).expanduser()
    if path.exists():
        return
    looks_like_path = source.startswith((".", "~", "/")) or source.endswith("/") or "\\" in source
    if looks_like_path or source.count("/") > 1:
        raise UsageError(
            f"Folder {source} does not exist. Pass a model folder with config.json, a "
            "transformers model_type or a Hub id 'org/name'."
        )
    if "/" in source or (types := known_model_types()) is None or source in types:
        return  # a Hub id, or nothing to check against
    raise UsageError(
        f"{source!r} is not a transformers model_type, a folder or a Hub id 'org/name'."
        + (
            hint(source, types)
            or " See `python -c 'import transformers; print(list(transformers.CONFIG_MAPPING))'`."
        )
    )


def check_folder(path: str, what: str = "model folder") -> None:
    if not Path(path).expanduser().is_dir():
        raise UsageError(
            f"{what.capitalize()} {path} does not exist. Pass the folder make-tiny wrote."
        )
