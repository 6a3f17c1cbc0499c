"""Resolve what the user named (a local folder, a bare model_type, or a Hub id) into config + files."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tinykit._files import tree_digest
from tinykit.errors import UnsupportedModelError, UsageError

HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+(@[\w./-]+)?$")


@dataclass(frozen=True)
class Source:
    """A resolved source: where its files are (None for a bare model_type) and its config."""

    origin: Literal["folder", "model_type", "hub"]  # what the user named
    name: str
    folder: Path | None
    config: dict[str, Any]
    revision: str
    """Hub commit sha; `folder_digest` for a folder; transformers version for a model_type."""

    @property
    def model_type(self) -> str:
        return self.config["model_type"]

    @property
    def short_name(self) -> str:
        return re.sub(r"[^\w.-]+", "-", self.name.split("@")[0].rstrip("/").split("/")[-1]).lower()


def resolve(
    source: str | os.PathLike[str], revision: str | None = None, trust_remote_code: bool = False
) -> Source:
    """Find the config of `source`; Hub ids download config/tokenizer/processor files only."""
    from tinykit._suggest import check_source

    text = str(source)
    check_source(text)
    path = Path(text).expanduser()
    if path.is_dir():
        src = _from_folder(path, text, revision=None)
    elif "/" not in text and _is_model_type(text):
        import transformers

        src = Source(
            "model_type",
            text,
            None,
            {"model_type": text},
            f"transformers-{transformers.__version__}",
        )
    elif HUB_ID.match(text) and not path.exists():
        repo_id, _, at = text.partition("@")
        from tinykit.hub import client as hub

        folder, sha = hub.download_source(
            repo_id, revision or at or None, include_code=trust_remote_code
        )
        src = _from_folder(folder, text, revision=sha, origin="hub")
    else:
        raise UsageError(
            f"source {text!r} is not a folder with config.json, a transformers model_type, or a Hub id "
            f"'org/name[@revision]'. Pass one of those (e.g. `tinykit make-tiny qwen3_moe`)."
        )
    check_native(src, trust_remote_code)
    return src


def _is_model_type(name: str) -> bool:
    from transformers import CONFIG_MAPPING

    return name in CONFIG_MAPPING


def _from_folder(folder: Path, name: str, revision: str | None, origin: str = "folder") -> Source:
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise UsageError(
            f"{folder} has no config.json. Point at a model folder as saved by save_pretrained."
        )
    try:
        config = json.loads(config_file.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"{config_file} is not valid JSON ({e}). Fix or replace the file.") from e
    if not isinstance(config, dict) or not config.get("model_type"):
        raise UsageError(
            f'{config_file} has no model_type. Add the "model_type" key the model\'s class expects.'
        )
    return Source(origin, name, folder, config, revision or folder_digest(folder))  # type: ignore[arg-type]


def folder_digest(folder: Path) -> str:
    """The revision of a local source: ``sha256:`` + its tree digest (the cache keys on the same)."""
    return "sha256:" + tree_digest(folder)


def check_native(src: Source, trust_remote_code: bool) -> None:
    """A config whose model_type transformers lacks needs the repo's own code, which runs only on request."""
    if _is_model_type(src.model_type):
        return
    if "auto_map" not in src.config:
        raise UnsupportedModelError(
            f"{src.name}: model_type {src.model_type!r} is unknown to transformers and the config has no "
            f"auto_map. Upgrade transformers, or fix config.json.",
            model_type=src.model_type,
        )
    if not trust_remote_code:
        raise UnsupportedModelError(
            f"{src.name}: model_type {src.model_type!r} needs the repository's own Python code (auto_map), "
            f"which tinykit does not run by default. Read that code, then pass --trust-remote-code.",
            model_type=src.model_type,
        )
    missing = sorted(
        {
            ref.split(".")[0] + ".py"
            for ref in src.config["auto_map"].values()
            if isinstance(ref, str)
            and "--" not in ref
            and not (src.folder and (src.folder / (ref.split(".")[0] + ".py")).is_file())
        }
    )
    if missing:
        raise UnsupportedModelError(
            f"{src.name}: --trust-remote-code needs {', '.join(missing)} beside config.json, and they are "
            f"missing. Add the repository's Python files to the folder.",
            model_type=src.model_type,
        )
