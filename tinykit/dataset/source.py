"""Where rows come from: a Hub dataset id, a local folder, or local data files.

`datasets` resolves every source (Hub repo, README `configs:`, data-file patterns) and streams
its rows; nothing is downloaded whole. Parquet is read row group by row group with pyarrow
through the same `HfFileSystem` (ranged requests: the footer, then only the column chunks of
the row groups the pool needs). Media stay undecoded (`{"bytes", "path"}`) until `media.py`
shrinks them.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tinykit.errors import HubError, UsageError

if TYPE_CHECKING:
    from datasets import DatasetBuilder, Features

# The formats tinykit reads; datasets knows more, but these are the ones tested end to end.
SUPPORTED_MODULES = ("arrow", "audiofolder", "csv", "imagefolder", "json", "parquet")
# Remote reads go in blocks of this size on top of what pyarrow asks for (fsspec read-ahead).
READ_BLOCK = 2**20
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# A missing "dir/x.parquet" is a typo'd path, not a Hub id.
_DATA_SUFFIXES = (".parquet", ".json", ".jsonl", ".csv", ".tsv", ".arrow")


@dataclass(frozen=True)
class Source:
    """A resolved source: what the user named, and how `datasets` should open it."""

    spec: str
    """The source exactly as given (used in the card's rebuild command)."""
    origin: Literal["hub", "folder", "files"]
    """Where the rows are: a Hub dataset, a local folder, or local data files."""
    revision: str | None = None
    """The Hub commit sha the rows were read at (None for local sources)."""
    module: str | None = None
    """For local files: the packaged builder (parquet, json, ...)."""
    files: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return self.module if self.origin == "files" and self.module else self.spec


def resolve(source: str | Path | list[str | Path], revision: str | None = None) -> Source:
    """Classify `source` and pin a Hub id to a commit sha."""
    if isinstance(source, (list, tuple)):
        return _local_files([Path(p) for p in source], spec=" ".join(str(p) for p in source))
    spec = str(source)
    path = Path(spec)
    if path.is_dir():
        return Source(spec=spec, origin="folder")
    if path.is_file():
        return _local_files([path], spec=spec)
    if _HUB_ID.fullmatch(spec) and path.suffix.lower() not in _DATA_SUFFIXES:
        try:
            return Source(spec=spec, origin="hub", revision=_hub_sha(spec, revision))
        except HubError as e:
            if not path.parent.is_dir():
                raise
            raise UsageError(
                f"Dataset source {spec!r} is not a local path ({str(path.parent)!r} has no "
                f"{path.name!r}), and not a Hub dataset either: {e}"
            ) from e
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
    return Source(spec=spec, origin="files", module=module, files=tuple(str(p) for p in paths))


def _hub_sha(repo_id: str, revision: str | None) -> str:
    from huggingface_hub import HfApi

    from tinykit.hub.client import hub_errors

    with hub_errors(repo_id, revision):
        sha = HfApi().dataset_info(repo_id, revision=revision).sha
    if sha is None:
        raise HubError(
            f"the Hub sent no commit sha for dataset {repo_id!r}. Retry, or pass a local folder.",
            repo_id=repo_id,
            revision=revision,
        )
    return sha


def license_of(src: Source) -> str | list[str] | None:
    """The `license:` of the source's dataset card, copied into the tiny one."""
    import yaml

    if src.origin == "files":
        return None
    if src.origin == "folder":
        card = Path(src.spec) / "README.md"
        text = card.read_text(encoding="utf-8") if card.is_file() else ""
    else:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError

        from tinykit.hub.client import hub_errors

        try:
            with hub_errors(src.spec, src.revision):
                path = hf_hub_download(
                    src.spec, "README.md", repo_type="dataset", revision=src.revision
                )
        except HubError as e:
            if isinstance(e.__cause__, EntryNotFoundError):
                return None
            raise
        text = Path(path).read_text(encoding="utf-8")
    if not text.startswith("---"):
        return None
    try:
        meta = yaml.safe_load(text.split("---", 2)[1]) or {}
    except yaml.YAMLError:
        return None
    value = meta.get("license") if isinstance(meta, dict) else None
    return value if isinstance(value, (str, list)) else None


def config_names(src: Source) -> list[str]:
    """Every config the source declares (a source without a `configs:` card has "default")."""
    if src.origin == "files":
        return ["default"]
    from datasets import get_dataset_config_names

    with _reading(repr(src.spec)):
        return list(get_dataset_config_names(src.path, revision=src.revision))


def open_config(src: Source, config: str) -> DatasetBuilder:
    from datasets import load_dataset_builder

    kwargs: dict[str, Any] = {"revision": src.revision}
    if src.origin == "files":
        kwargs["data_files"] = {"train": list(src.files)}
    else:
        kwargs["name"] = config
    with _reading(f"{src.spec!r} config {config!r}"):
        builder = load_dataset_builder(src.path, **kwargs)
    module = builder.name.lower()
    if src.origin != "files" and module not in SUPPORTED_MODULES:
        raise UsageError(
            f"Config {config!r} of {src.spec!r} is stored as {module!r}, "
            "which tinykit does not read. "
            f"Supported: {', '.join(SUPPORTED_MODULES)}. Convert the data files to parquet first."
        )
    if getattr(builder.config, "decode_num_threads", None):
        # Remote image/audio folders are otherwise decoded in 32 threads with the declared
        # features, ahead of (and despite) the undecoded reading stream_rows asks for.
        builder.config.decode_num_threads = 0
    return builder


def split_names(builder: DatasetBuilder) -> list[str]:
    return [str(name) for name in builder.config.data_files or {}]


def stream_rows(builder: DatasetBuilder, split: str, limit: int) -> tuple[Features | None, list]:
    """The first `limit` rows of one split (media undecoded) and its declared Features.

    Features are None for formats that carry no schema (json, csv): see `infer_features`.
    """
    with _reading(f"config {builder.config.name!r} split {split!r}"):
        if builder.name.lower() == "parquet" and not (
            builder.config.filters or builder.config.columns
        ):
            return _parquet_head(builder, split, limit)
        stream = builder.as_streaming_dataset(split=split)
        features = stream.features
        if features is not None:  # schema-less formats (json, csv) have no media to keep undecoded
            stream = stream.cast(_audio_read_as_image(features)).decode(False)
        rows = iter(stream)
        try:
            return features, list(itertools.islice(rows, limit))
        finally:
            rows.close()


def _parquet_head(builder: DatasetBuilder, split: str, limit: int) -> tuple[Features, list]:
    """Read whole row groups, one at a time, until `limit` rows are in hand.

    `datasets`' streaming reader scans through pyarrow's asynchronous dataset API, whose
    background I/O threads can read several row groups past the rows asked for (measured:
    +6 MB on a 24 MB file, depending on thread timing). A synchronous `ParquetFile` without
    pre-buffering reads the footer and then only the column chunks of the row groups used,
    as Range requests through the same `HfFileSystem` that `datasets` opens.
    """
    import pyarrow.parquet as pq
    from datasets import DownloadConfig, Features
    from datasets.table import table_cast
    from datasets.utils.file_utils import xopen

    features = builder.info.features
    rows: list[dict] = []
    for url in builder.config.data_files[split]:
        with xopen(url, "rb", download_config=DownloadConfig(), block_size=READ_BLOCK) as f:
            parquet = pq.ParquetFile(f, pre_buffer=False)
            features = features or Features.from_arrow_schema(parquet.schema_arrow)
            for group in range(parquet.num_row_groups):
                table = table_cast(parquet.read_row_group(group), features.arrow_schema)
                rows.extend(table.slice(0, limit - len(rows)).to_pylist())
                if len(rows) >= limit:
                    return features, rows
    return features, rows


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
    """One schema inferred over all pooled rows of a config (streaming looks at the first 5)."""
    from datasets import Dataset

    if not rows:
        raise UsageError(
            f"{where} has no rows. Pick another config or split with --config/--split."
        )
    return Dataset.from_list(rows).features


@contextlib.contextmanager
def _reading(what: str) -> Iterator[None]:
    """`datasets`' "no data files" and "cannot parse" failures become one-line UsageErrors.

    `datasets` also logs a parse failure itself before raising; its logger is quiet in here,
    because the error raised says the same thing in one line.
    """
    import pyarrow as pa
    from datasets.exceptions import DatasetGenerationError

    log = logging.getLogger("datasets")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    except UsageError:
        raise
    except StopIteration as e:  # datasets peeks at the first table of an empty file
        raise UsageError(
            f"{what} has no rows (an empty data file). Point tinykit at files that hold data."
        ) from e
    except FileNotFoundError as e:
        raise UsageError(
            f"No data files found in {what}: {_first_line(e)}. "
            "Point tinykit at parquet/jsonl/csv/arrow files or an image/audio folder."
        ) from e
    except (pa.ArrowException, DatasetGenerationError, ValueError) as e:
        cause = e.__cause__ if isinstance(e, DatasetGenerationError) and e.__cause__ else e
        raise UsageError(
            f"Could not read the data files of {what}: {_first_line(cause)}. "
            "Check that the files are valid and all in one format."
        ) from e
    finally:
        log.setLevel(level)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(".")
