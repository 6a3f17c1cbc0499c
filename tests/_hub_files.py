"""The dev set: every config in ../shared/hub-files, split by what transformers can build natively."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import HUB_FILES

CONFIGS = sorted(p.parent for p in HUB_FILES.glob("*/*/config.json"))
REMOTE_ONLY = {"THUDM/chatglm3-6b"}  # model_type unknown to transformers: needs the repo's code
NATIVE = [p for p in CONFIGS if f"{p.parent.name}/{p.name}" not in REMOTE_ONLY]


def repo_id(folder) -> str:
    return f"{folder.parent.name}/{folder.name}"


def is_multimodal(folder) -> bool:
    raw = json.loads((folder / "config.json").read_text())
    return "vision_config" in raw or raw["model_type"] in ("whisper", "vit", "clip")


LOAD_ALL = """
import sys, warnings
import transformers
warnings.simplefilter("always")
transformers.utils.logging.disable_progress_bar()  # bars are not warnings
for path in sys.argv[1:]:
    config = transformers.AutoConfig.from_pretrained(path)
    getattr(transformers, (config.architectures or ["AutoModel"])[0]).from_pretrained(path)
"""


def load_warnings(paths) -> str:
    """What loading each model folder, in a fresh interpreter, writes to stderr (warnings and
    transformers' log; warning_once messages are printed the first time in a process)."""
    done = subprocess.run(
        [sys.executable, "-c", LOAD_ALL, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TRANSFORMERS_VERBOSITY": "warning"},
    )
    assert done.returncode == 0, done.stderr
    return done.stderr.strip()
