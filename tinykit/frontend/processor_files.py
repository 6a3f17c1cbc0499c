"""The processor files a tiny model ships (`preprocessor_config.json`, `processor_config.json`,
`video_preprocessor_config.json`): a source's own copied at the tiny geometry, a built
processor's saved, and what loads them."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any, TypeGuard

from tinykit._values import is_int

PROCESSOR_FILES = (
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
)

AUTO_CLASSES = ("AutoProcessor", "AutoImageProcessor", "AutoFeatureExtractor", "AutoVideoProcessor")
"""transformers' loaders of processor files, the whole processor first."""


def has_processor_files(folder: Path | None) -> TypeGuard[Path]:
    """Whether `folder` is a folder holding processor files."""
    return folder is not None and any((folder / n).is_file() for n in PROCESSOR_FILES)


def shipped_processor(folder: Path) -> str:
    """What loads the processor files in `folder`: the first of AUTO_CLASSES that gives a
    processor (not the tokenizer alone), as 'AutoProcessor: Idefics3Processor'; '' where the
    folder has no processor files; 'fails: <error>' where none loads them."""
    import transformers
    from transformers import PreTrainedTokenizerBase

    if not has_processor_files(folder):
        return ""
    error = ""
    for name in AUTO_CLASSES:
        try:
            loaded = getattr(transformers, name).from_pretrained(folder)
        except Exception as e:  # this loader does not take these files: the next one
            error = error or f"{name}: {type(e).__name__}: {' '.join(str(e).split())[:120]}"
            continue
        if not isinstance(loaded, PreTrainedTokenizerBase):
            return f"{name}: {type(loaded).__name__}"
    return f"fails: {error}"


def save_processor(processor: Any, tmp: Path) -> None:
    """The processor's own files (not its tokenizer's: those are shipped already) into `tmp`."""
    with tempfile.TemporaryDirectory(prefix="tinykit-processor-") as scratch:
        processor.save_pretrained(scratch)
        for name in PROCESSOR_FILES:
            path = Path(scratch) / name
            if path.is_file():
                (tmp / name).write_bytes(path.read_bytes())


def copy_processor(folder: Path, config: Any, tmp: Path) -> None:
    """Copy a source's image/video processor files, with their image geometry set to the tiny
    vision tower's and a Whisper-style audio window to the tiny encoder's."""
    vision = getattr(config, "vision_config", None) or config
    size, patch = getattr(vision, "image_size", None), getattr(vision, "patch_size", None)
    for name in PROCESSOR_FILES:
        path = folder / name
        if not path.is_file():
            continue
        data = json.loads(path.read_text())
        if isinstance(size, int):
            _fit_image_geometry(data, size, patch)
        fit_audio_window(data, config)
        (tmp / name).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _fit_image_geometry(data: dict[str, Any], size: int, patch: Any) -> None:
    """An image processor's settings (`data`) set to the tiny tower's image `size` and patch."""
    for key in ("size", "crop_size"):
        if isinstance(data.get(key), dict):
            data[key] = {k: size for k in data[key]}
        elif isinstance(data.get(key), int):
            data[key] = size
    if isinstance(patch, int) and isinstance(data.get("patch_size"), int):
        data["patch_size"] = patch


def fit_audio_window(data: dict[str, Any], config: Any) -> bool:
    """A Whisper-style extractor's settings (`data`) padding every clip to `chunk_length`
    seconds set to the tiny encoder's window of 2 x max_source_positions frames; where those
    frames are not whole seconds at its hop, the hop is shortened until they are (1,024 frames:
    160 samples -> 125). Whether they were set."""
    positions = getattr(config, "max_source_positions", None)
    keys = ("chunk_length", "hop_length", "sampling_rate")
    if not is_int(positions) or not all(is_int(data.get(k)) for k in keys):
        return False
    frames, rate = 2 * positions, data["sampling_rate"]
    step = rate // math.gcd(frames, rate)  # the hops, in samples, that give whole seconds
    hop = data["hop_length"] // step * step
    if hop == 0:
        return False
    samples = frames * hop
    data["hop_length"], data["chunk_length"] = hop, samples // rate
    for key, value in (("n_samples", samples), ("nb_max_frames", 2 * positions)):
        if key in data:
            data[key] = value
    return True
