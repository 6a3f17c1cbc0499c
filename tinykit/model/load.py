"""load: the one loader of a model folder (verify, the fixtures, slices, compat probes use it).

``open_model_folder(path)`` reads ``config.json`` and picks the class: ``architectures[0]`` when
transformers has it (a near miss answers "did you mean"), the folder's own code when its
``auto_map`` names a model_type transformers lacks (only with ``trust_remote_code=True``), else
``AutoModel``. ``ModelFolder.load()`` then loads the weights; weights that disagree with the
config or do not load at all are a ``TinyArtifactInvalid`` naming the tensors, never
transformers' multi-line load table. ``load_model(path)`` does both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinykit.errors import TinyArtifactInvalid, UnsupportedModelError, UsageError


def one_line(e: BaseException) -> str:
    """`Type: first line of the message`: transformers' errors can run to dozens of lines."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


@dataclass(frozen=True)
class ModelFolder:
    """A model folder whose config is read and class chosen; the weights are not loaded yet."""

    path: Path
    config: Any
    cls: Any
    own_code: dict[str, str] = field(default_factory=dict)
    """``auto_map`` of a folder that runs its own model code (empty for a native type)."""

    @property
    def class_name(self) -> str:
        return getattr(self.cls, "__name__", str(self.cls))

    @property
    def load_options(self) -> dict[str, Any]:
        """What every ``from_pretrained`` of this folder needs (its own code, when trusted)."""
        return {"trust_remote_code": True} if self.own_code else {}

    def load(self, **from_pretrained: Any) -> Any:
        """``cls.from_pretrained(path)``; raises TinyArtifactInvalid when the weights do not load.

        Weights whose shapes disagree with config.json are listed by name and shape in one line,
        instead of transformers' load report followed by a RuntimeError.
        """
        from transformers.utils import logging as hf_logging

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the load report table is replaced by our one line
        try:
            model, info = self._from_pretrained(from_pretrained)
        except Exception as e:  # missing or truncated weights, unreadable files: all findings
            problem = f"the weights (model.safetensors) do not load: {one_line(e)}"
            raise _invalid(self.path, problem) from e
        finally:
            hf_logging.set_verbosity(verbosity)
        if mismatched := sorted(info.get("mismatched_keys") or ()):
            shapes = ", ".join(
                f"{key} is {tuple(saved)} in the weights but {tuple(expected)} by config.json"
                for key, saved, expected in mismatched
            )
            problem = f"the weights do not load: they do not match config.json: {shapes}"
            raise _invalid(self.path, problem)
        return model

    def _from_pretrained(self, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """(model, loading info). A class whose own from_pretrained uses the model it loaded
        as if the loading info were not asked for (Qwen2.5-Omni's loads its speakers into the
        (model, info) pair) is loaded again plainly, a size mismatch then raising instead of
        being listed."""
        try:
            return self.cls.from_pretrained(
                self.path,
                ignore_mismatched_sizes=True,
                output_loading_info=True,
                **self.load_options,
                **options,
            )
        except AttributeError as e:
            if "tuple" not in str(e) or "from_pretrained" not in vars(self.cls):
                raise
        return self.cls.from_pretrained(self.path, **self.load_options, **options), {}


def _invalid(folder: Path, problem: str) -> TinyArtifactInvalid:
    return TinyArtifactInvalid(
        f"{folder}: {problem}. Rebuild it with `tinykit make-tiny`, or fix the file named.",
        problem=problem,
    )


def open_model_folder(path: str | Path, *, trust_remote_code: bool = False) -> ModelFolder:
    """Read ``path/config.json`` and choose the class that loads it (no weights are read).

    Raises:
        UsageError: no or unreadable config.json; an ``architectures[0]`` transformers lacks
            (with the nearest class names).
        UnsupportedModelError: the folder needs its own code and ``trust_remote_code`` is off.
    """
    import transformers

    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise UsageError(
            f"{folder} has no config.json: not a model folder. Pass the folder make-tiny wrote."
        )
    own_code = _own_code(folder)
    if own_code and not trust_remote_code:
        raise UnsupportedModelError(
            f"{folder} loads with its own Python code (auto_map in config.json: "
            f"{', '.join(sorted(own_code))}), which tinykit does not run by default. Read that "
            "code, then pass --trust-remote-code (trust_remote_code=True)."
        )
    trust = {"trust_remote_code": True} if own_code else {}
    try:
        config = transformers.AutoConfig.from_pretrained(folder, **trust)
    except (OSError, ValueError, KeyError) as e:  # not a model folder at all: bad input
        raise UsageError(
            f"{folder}/config.json cannot be read: {one_line(e)}. Rebuild it with make-tiny."
        ) from e
    cls = _remote_auto_class(own_code) if own_code else architecture_class(config, folder)
    return ModelFolder(folder, config, cls, own_code)


def load_model(path: str | Path, *, trust_remote_code: bool = False, **from_pretrained: Any) -> Any:
    """The model in ``path``, loaded with the class its config names (see module doc)."""
    return open_model_folder(path, trust_remote_code=trust_remote_code).load(**from_pretrained)


def architecture_class(config: Any, folder: Path) -> Any:
    """The transformers class ``config.architectures[0]`` names (AutoModel when none is named).

    Raises:
        UsageError: a name transformers lacks, with the nearest class names ("did you mean"),
            unless the config maps its own code (``auto_map``).
    """
    import transformers

    from tinykit._suggest import check_model_class

    arch = (config.architectures or [None])[0]
    if arch and not hasattr(transformers, arch) and not getattr(config, "auto_map", None):
        check_model_class(arch, f"{folder}/config.json architectures[0]")
    return getattr(transformers, arch or "", None) or transformers.AutoModel


def _own_code(folder: Path) -> dict[str, str]:
    """config.json's ``auto_map`` when its model_type needs it (transformers lacks the type)."""
    from transformers import CONFIG_MAPPING

    try:
        raw = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}  # unreadable: AutoConfig reports it
    auto_map = raw.get("auto_map") if isinstance(raw, dict) else None
    if not isinstance(auto_map, dict) or raw.get("model_type") in CONFIG_MAPPING:
        return {}
    return auto_map


def _remote_auto_class(auto_map: dict[str, str]) -> Any:
    """The auto class that loads a folder's own model code: its causal LM, else its base model."""
    import transformers

    return getattr(
        transformers, next((a for a in auto_map if a.startswith("AutoModelFor")), "AutoModel")
    )
