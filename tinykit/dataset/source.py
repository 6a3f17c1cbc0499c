"""Where rows come from: a Hub dataset id, a local folder, or local data files.

Everything is read through `datasets` in streaming mode, so a Hub parquet file is read with
ranged requests through `HfFileSystem` (only the footer and the row groups the rows live in),
never downloaded whole. Media stay undecoded (`{"bytes", "path"}`) until `media.py` shrinks them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinykit.errors import UsageError

if TYPE_CHECKING:
    from datasets import DatasetBuilder, Features

# The formats tinykit reads; datasets knows more, but these are the ones tested end to end.
SUPPORTED_MODULES = ("arrow", "audiofolder", "csv", "imagefolder", "json", "parquet")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# A missing "dir/x.parquet" is a typo'd path, not a Hub id.
_DATA_SUFFIXES = (".parquet", ".json", ".jsonl", ".csv", ".tsv", ".arrow")


@dataclass(frozen=True)
class Source:
    """A resolved source: what the user named, and how `datasets` should open it."""

    spec: str
    """The source exactly as given (used in the card's rebuild command)."""
    kind: str
    """"hub", "folder" or "files"."""
    revision: str | None = None
    """The Hub commit sha the rows were read at (None for local sources)."""
    module: str | None = None
    """For local files: the packaged builder (parquet, json, ...)."""
    files: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return self.module if self.kind == "files" else self.spec


def resolve(source: str | Path | list[str | Path], revision: str | None = None) -> Source:
    """Classify `source` and pin a Hub id to a commit sha."""
    if isinstance(source, (list, tuple)):
        return _local_files([Path(p) for p in source], spec=" ".join(str(p) for p in source))
    spec = str(source)
    path = Path(spec)
    if path.is_dir():
        return Source(spec=spec, kind="folder")
    if path.is_file():
        return _local_files([path], spec=spec)
    if _HUB_ID.fullmatch(spec) and path.suffix.lower() not in _DATA_SUFFIXES:
        return Source(spec=spec, kind="hub", revision=_hub_sha(spec, revision))
    raise UsageError(
        f"Dataset source {spec!r} is neither an existing file or folder nor a Hub id. "
        "Expected a path to data files or a folder, or an 'org/name' Hub dataset id. "
        "Check the path, or pass the Hub id as org/name."
    )


def _local_files(paths: list[Path], spec: str) -> Source:
    from datasets.packaged_modules import _EXTENSION_TO_MODULE

    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise UsageError(f"Data files not found: {missing}. Check the paths and try again.")
    modules = {_EXTENSION_TO_MODULE.get(p.suffix.lower(), (None,))[0] for p in paths}
    module = modules.pop() if len(modules) == 1 else None
    if module not in SUPPORTED_MODULES:
        names = ", ".join(p.name for p in paths)
        raise UsageError(
            f"Unsupported data file format for {names}. tinykit reads .parquet, .jsonl/.json, "
            ".csv/.tsv and .arrow files (all of one format), or an imagefolder/audiofolder folder. "
            "Convert the files to one of these formats or pass the folder instead."
        )
    return Source(spec=spec, kind="files", module=module, files=tuple(str(p) for p in paths))


def _hub_sha(repo_id: str, revision: str | None) -> str:
    from huggingface_hub import HfApi

    from tinykit.hub import hub_errors

    with hub_errors(repo_id, revision):
        return HfApi().dataset_info(repo_id, revision=revision).sha


def config_names(src: Source) -> list[str]:
    """Every config the source declares (a source without a `configs:` card has "default")."""
    if src.kind == "files":
        return ["default"]
    from datasets import get_dataset_config_names

    with _translated(src):
        return list(get_dataset_config_names(src.path, revision=src.revision))


def open_config(src: Source, config: str) -> DatasetBuilder:
    from datasets import load_dataset_builder

    kwargs: dict[str, Any] = {"revision": src.revision}
    if src.kind == "files":
        kwargs["data_files"] = {"train": list(src.files)}
    else:
        kwargs["name"] = config
    with _translated(src):
        builder = load_dataset_builder(src.path, **kwargs)
    module = builder.name.lower()
    if src.kind != "files" and module not in SUPPORTED_MODULES:
        raise UsageError(
            f"Config {config!r} of {src.spec!r} is stored as {module!r}, which tinykit does not read. "
            f"Supported: {', '.join(SUPPORTED_MODULES)}. Convert the data files to parquet first."
        )
    if module == "parquet" and builder.config.fragment_scan_options is None:
        import pyarrow.dataset as pds

        # pyarrow pre-buffers by coalescing reads up to 32 MiB, far past the one row group a
        # small pool needs; without it each column chunk of that row group is one Range read.
        builder.config.fragment_scan_options = pds.ParquetFragmentScanOptions(pre_buffer=False)
    return builder


def split_names(builder: DatasetBuilder) -> list[str]:
    return [str(name) for name in builder.config.data_files or {}]


def stream_rows(builder: DatasetBuilder, split: str, limit: int) -> tuple[Features | None, list]:
    """The first `limit` rows of one split (media undecoded) and its declared Features.

    Features are None for formats that carry no schema (json, csv): see `infer_features`.
    """
    with _translated(None):
        stream = builder.as_streaming_dataset(split=split)
        features = stream.features
        if features is not None:
            stream = stream.cast(_audio_read_as_image(features))
        return features, list(stream.decode(False).take(limit))


def _audio_read_as_image(feature: Any) -> Any:
    """The same schema with every Audio read as an undecoded Image.

    Audio folders yield file paths that `Audio.encode_example` turns into `{"bytes", "path"}`,
    and it insists on importing torchcodec (which needs FFmpeg) even for that. An undecoded
    Image has the same storage and makes the same dict with no extra package.
    """
    from datasets import Audio, Features, Image, LargeList, List

    if isinstance(feature, Audio):
        return Image(decode=False)
    if isinstance(feature, dict):
        mapped = {k: _audio_read_as_image(f) for k, f in feature.items()}
        return Features(mapped) if isinstance(feature, Features) else mapped
    if isinstance(feature, List):
        return List(_audio_read_as_image(feature.feature), length=feature.length)
    if isinstance(feature, LargeList):
        return LargeList(_audio_read_as_image(feature.feature))
    return feature


def infer_features(rows: list[dict], where: str) -> Features:
    """Infer one schema over all pooled rows of a config (not just the first few, as streaming does)."""
    from datasets import Dataset

    if not rows:
        raise UsageError(f"{where} has no rows. Pick another config or split with --config/--split.")
    return Dataset.from_list(rows).features


class _translated:
    """Turn `datasets`' 'no such dataset / no data files' errors into one-line tinykit errors."""

    def __init__(self, src: Source | None) -> None:
        self.src = src

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, tb) -> bool:
        if err is None or not isinstance(err, (FileNotFoundError, ValueError, TypeError)):
            return False
        if isinstance(err, UsageError):
            return False
        import pyarrow as pa

        what = self.src.spec if self.src else "the dataset"
        if isinstance(err, FileNotFoundError):
            raise UsageError(
                f"No data files found in {what!r}: {err}. "
                "Point tinykit at parquet/jsonl/csv/arrow files or an image/audio folder."
            ) from err
        if isinstance(err, pa.ArrowInvalid) or "pars" in str(err).lower():
            raise UsageError(
                f"Could not read the data files of {what!r}: {err}. "
                "Check that the files are valid and all in one format."
            ) from err
        return False
