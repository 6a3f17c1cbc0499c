"""The dev set: every config in ../shared/hub-files, split by what transformers can build natively."""

from __future__ import annotations

import json

from conftest import HUB_FILES

CONFIGS = sorted(p.parent for p in HUB_FILES.glob("*/*/config.json"))
REMOTE_ONLY = {"THUDM/chatglm3-6b"}  # model_type unknown to transformers: needs the repo's code
NATIVE = [p for p in CONFIGS if f"{p.parent.name}/{p.name}" not in REMOTE_ONLY]


def repo_id(folder) -> str:
    return f"{folder.parent.name}/{folder.name}"


def is_multimodal(folder) -> bool:
    raw = json.loads((folder / "config.json").read_text())
    return "vision_config" in raw or raw["model_type"] in ("whisper", "vit", "clip")
