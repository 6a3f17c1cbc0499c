"""Shrink the media inside rows: images to <= 32 px on the long side, audio to <= 1 s.

Images keep their aspect ratio, mode and file format; audio keeps its sampling rate, channels,
container and sample format. Media that are already small are kept byte for byte. Values are
the undecoded `{"bytes", "path"}` dicts that `datasets` stores; the written path is only the
file name, so no local directory leaks into the output.
"""

from __future__ import annotations

import io
import posixpath
from typing import Any

from tinykit.errors import UsageError

MAX_IMAGE_SIDE = 32
MAX_AUDIO_SECONDS = 1


def shrink_row(row: dict, features: Any) -> dict:
    return {name: _walk(row.get(name), feature, name) for name, feature in features.items()}


def has_media(value: Any, feature: Any) -> bool:
    """Whether a value holds at least one image or audio clip (at any depth)."""
    found: list[Any] = []

    def keep(v: Any) -> Any:
        found.append(v)
        return v

    _walk(value, feature, "", visit=keep)
    return bool(found)


def contains_media(feature: Any) -> bool:
    from datasets import Audio, Image, LargeList, List

    if isinstance(feature, (Image, Audio)):
        return True
    if isinstance(feature, dict):
        return any(contains_media(f) for f in feature.values())
    if isinstance(feature, (List, LargeList)):
        return contains_media(feature.feature)
    return False


def _walk(value: Any, feature: Any, where: str, visit=None) -> Any:
    """Apply `visit` (default: shrink) to every image/audio value under `feature`."""
    from datasets import Audio, Image, LargeList, List

    if value is None:
        return None
    if isinstance(feature, (Image, Audio)):
        if visit is not None:
            return visit(value)
        shrink = shrink_image if isinstance(feature, Image) else shrink_audio
        return _shrunk_value(value, shrink, where)
    if isinstance(feature, dict):
        return {k: _walk(value.get(k), f, f"{where}.{k}", visit) for k, f in feature.items()}
    if isinstance(feature, (List, LargeList)) and contains_media(feature.feature):
        return [_walk(v, feature.feature, f"{where}[{i}]", visit) for i, v in enumerate(value)]
    return value


def _shrunk_value(value: dict, shrink, where: str) -> dict:
    path = value.get("path")
    name = posixpath.basename(path.split("::")[0]) if path else None
    data = value.get("bytes")
    if data is None:
        data = _read(path, where)
    return {"bytes": shrink(data, f"{where} ({name or 'embedded bytes'})"), "path": name}


def _read(path: str | None, where: str) -> bytes:
    from datasets import DownloadConfig
    from datasets.utils.file_utils import xopen

    if not path:
        raise UsageError(
            f"Media in column {where} has neither bytes nor a path. Fix or drop that row."
        )
    try:
        with xopen(path, "rb", download_config=DownloadConfig()) as f:
            return f.read()
    except OSError as e:
        raise UsageError(
            f"Unreadable media {path!r} in column {where}: {e}. "
            "Check that the file exists and is readable, or remove the row from the source."
        ) from e


def shrink_image(data: bytes, where: str = "image") -> bytes:
    """Downscale to at most 32 px on the long side, keeping aspect ratio, mode and format."""
    from PIL import Image, UnidentifiedImageError

    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise UsageError(
            f"Unreadable image in {where}: {e}. "
            "Re-encode it as PNG or JPEG, or remove the row from the source."
        ) from e
    if max(img.size) <= MAX_IMAGE_SIDE:
        return data
    small = img.copy()
    small.thumbnail((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE), Image.Resampling.LANCZOS)
    keep = {k: img.info[k] for k in ("transparency",) if k in img.info}
    out = io.BytesIO()
    small.save(out, format=img.format or "PNG", **keep)
    return out.getvalue()


def shrink_audio(data: bytes, where: str = "audio") -> bytes:
    """Cut to at most 1 s, keeping sampling rate, channels, container and sample format."""
    import soundfile as sf

    try:
        info = sf.info(io.BytesIO(data))
        if info.frames <= info.samplerate * MAX_AUDIO_SECONDS:
            return data
        frames, rate = sf.read(
            io.BytesIO(data), frames=info.samplerate * MAX_AUDIO_SECONDS, always_2d=True
        )
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        raise UsageError(
            f"Unreadable audio in {where}: {e}. "
            "Re-encode it as WAV or FLAC, or remove the row from the source."
        ) from e
    out = io.BytesIO()
    sf.write(out, frames, rate, format=info.format, subtype=info.subtype)
    return out.getvalue()
