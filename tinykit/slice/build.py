"""slice: a few-layer copy of a real model with its real weights, fetching only the kept tensors.

    tinykit.slice_model("org/name", "slices/name-2l", layers=2)

The config's layer stacks are planned in `slice_plan` (make-tiny's layer planner, so every
per-layer field is rewritten in lockstep). The safetensors headers are read alone (on
the Hub: HTTP Range reads), the kept tensors (every tensor outside the layer stacks, plus
the kept layers') are read by byte ranges, renumbered and streamed into the output shards.
Pickle checkpoints are refused, never unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tinykit._deprecate import old_positions
from tinykit._files import replace_folder
from tinykit._versions import __version__
from tinykit.errors import UnsupportedModelError, UsageError
from tinykit.slice.plan import Stack, map_tensors, parse_layers, plan_stacks
from tinykit.slice.weights import (
    SAFETENSORS_CODES,
    Pieces,
    ShardWriter,
    TensorEntry,
    coalesce,
    header_length,
    local_pieces,
    parse_header,
    split_stream,
)

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
INDEX = "model.safetensors.index.json"
# Files copied beside the weights: generation config, tokenizer, processor, chat template.
COPIED = re.compile(r".*\.(json|txt|model|jinja|tiktoken|vocab)$|tokenizer\.model\..*")
DEFAULT_SHARD_BYTES = 5 * 1024**3


@dataclass
class SliceResult:
    """What `slice_model` wrote: the folder, the layer map and the bytes it read."""

    path: Path
    source: str
    revision: str
    layer_map: dict[str, list[int]]  # weight prefix -> source index of each kept layer
    tensors: int
    bytes_kept: int  # bytes of the kept tensors in the source
    bytes_fetched: int  # kept tensors + headers actually read
    ranges: list[tuple[str, int, int]] = field(default_factory=list)
    check: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path), "ranges": len(self.ranges)}


class _Weights:
    """The source's file list, its safetensors headers, and how to read byte ranges of it."""

    def __init__(self, source: str, revision: str | None) -> None:
        from tinykit.source import HUB_ID

        self.source = source
        path = Path(source).expanduser()
        self.ranges: list[tuple[str, int, int]] = []
        self._small: Path | None = None
        self.folder: Path | None = None
        self.hub: str | None = None
        if path.is_dir():
            self.folder = path
            self.files = sorted(p.name for p in path.iterdir() if p.is_file())
            self.revision = ""
        elif HUB_ID.match(source):
            from tinykit.hub import client

            repo_id, _, at = source.partition("@")
            self.hub = repo_id
            self.revision, self.files = client.repo_files(repo_id, revision or at or None)
        else:
            raise UsageError(
                f"source {source!r} is not a folder or a Hub id 'org/name[@revision]'. Pass the "
                "folder of a saved model (config.json + safetensors) or a Hub model id."
            )
        if "config.json" not in self.files:
            raise UsageError(
                f"{source} has no config.json. Point at a model saved by save_pretrained."
            )
        self.weight_files = self._weight_files()

    def _weight_files(self) -> list[str]:
        shards = [f for f in self.files if f.endswith(".safetensors")]
        if not shards:
            raise self._no_safetensors()
        if "model.safetensors" in shards:
            return ["model.safetensors"]
        if INDEX in self.files:
            return self._indexed_shards()
        if len(shards) == 1:
            return shards
        raise UsageError(
            f"{self.source} has {len(shards)} safetensors shards but no {INDEX} to say which "
            "tensor is where. Add the index that save_pretrained writes beside them."
        )

    def _no_safetensors(self) -> UsageError:
        pickles = [f for f in self.files if f.endswith(PICKLE_SUFFIXES)]
        if pickles:
            return UsageError(
                f"{self.source} has only pickle checkpoints ({', '.join(pickles[:3])}); tinykit "
                "never unpickles. Convert them to safetensors (save_pretrained writes "
                "safetensors by default) and slice that."
            )
        return UsageError(
            f"{self.source} has no *.safetensors weights. Slice a saved model folder."
        )

    def _indexed_shards(self) -> list[str]:
        """The shard files the index's weight_map names, each of them there."""
        index = read_json(self.small_file(INDEX), f"{INDEX} of {self.source}")
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
        ):
            raise UsageError(
                f"{INDEX} of {self.source}: field 'weight_map' must map tensor names to "
                f"shard file names, got {type(weight_map).__name__}. Re-save the model, or "
                "fix the index."
            )
        wanted = sorted(set(weight_map.values()))
        absent = [f for f in wanted if f not in self.files]
        if absent or not wanted:
            raise UsageError(
                f"{INDEX} of {self.source} names shard(s) {absent[:3] or '(none)'} that are "
                "not there. Re-save the model, or fix the index."
            )
        return wanted

    @property
    def small_names(self) -> list[str]:
        """Config, index, generation config, tokenizer and processor files (top level only)."""
        return [f for f in self.files if "/" not in f and COPIED.fullmatch(f)]

    def small_file(self, name: str) -> Path:
        if self.folder is not None:
            return self.folder / name
        if self._small is None:  # every small file in one parallel download, on first need
            from tinykit.hub import client

            assert self.hub is not None
            self._small = client.download_files(self.hub, self.revision, self.small_names)
        return self._small / name

    def read(self, file: str, start: int, end: int) -> bytes:
        self.ranges.append((file, start, end))
        if self.folder is not None:
            with open(self.folder / file, "rb") as f:
                f.seek(start)
                return f.read(end - start)
        from tinykit.hub import client

        assert self.hub is not None
        return client.read_range(self.hub, file, self.revision, start, end)

    def entries(self) -> list[TensorEntry]:
        # Two exact reads per file, not huggingface_hub's get_safetensors_metadata: that always
        # fetches 100 kB per shard and drops the header length the absolute offsets need.
        out = []
        for file in self.weight_files:
            size = (self.folder / file).stat().st_size if self.folder is not None else None
            shown = str(self.folder / file) if self.folder is not None else f"{self.hub}/{file}"
            n = header_length(self.read(file, 0, 8), shown, size)
            raw = self.read(file, 8, 8 + n)
            if len(raw) != n:
                raise UsageError(
                    f"{shown} ended inside its {n}-byte safetensors header: the "
                    "file is truncated. Fix the source and slice again."
                )
            out += parse_header(raw, file, size, where=shown)
        return out

    def pieces(self, entries: list[TensorEntry]) -> Pieces:
        ranges = [r for r in coalesce(entries) if r[2] > r[1]]
        self.ranges += [(f, s, e) for f, s, e, _ in ranges]
        if self.folder is not None:
            yield from local_pieces(self.folder, entries)
            return
        from tinykit.hub import client

        assert self.hub is not None
        for file, start, end, group in ranges:
            with client.stream_range(self.hub, file, self.revision, start, end) as chunks:
                yield from split_stream(chunks, group)


def _layers_second(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """The old `slice_model(source, layers, out=...)`: a count or indexes where `out` now is."""
    if len(args) != 2:
        return False
    return "out" in kwargs or not (args[1] is None or isinstance(args[1], (str, os.PathLike)))


@old_positions("source", "layers", "out", is_old=_layers_second)
def slice_model(
    source: str | Path,
    out: str | Path | None = None,
    *,
    layers: int | str | Sequence[int] = 2,
    revision: str | None = None,
    dtype: str | None = None,
    check: bool = False,
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> SliceResult:
    """Write a few-layer slice of `source` (Hub id or local folder of safetensors) to `out`.

    `layers`: a count (the first N of every stack), "auto" (the first layer of every block
    type) or explicit source indexes. `dtype` ("bfloat16", "float16", "float32") converts the
    floating-point tensors. `check=True` compares the slice's outputs with the full model's
    computation over the kept layers (this downloads the full model from the Hub) and raises
    CheckFailed when they differ. Nothing is written unless everything succeeds.
    """
    out = _new_folder(out)
    target_dtype = _dtype_code(dtype)
    plan_arg = parse_layers(layers)
    weights = _Weights(str(source), revision)
    config, stacks = _planned_config(weights, source, plan_arg)
    entries = weights.entries()
    kept, layer_map = map_tensors(entries, stacks)
    small = _small_files(weights)
    revision_id = weights.revision or _local_revision(weights)

    # staged beside `out` and renamed into place whole (tinykit._files): a failure leaves nothing
    with replace_folder(out) as tmp:
        kept.sort(key=lambda item: (item[1].file, item[1].start))  # the order they are fetched in
        writer = ShardWriter(tmp, kept, max_shard_bytes, target_dtype)
        writer.write(weights.pieces([e for _, e in kept]))
        if (index := writer.index()) is not None:
            (tmp / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        _write_config(tmp, config, target_dtype)
        for name, path in small.items():
            shutil.copyfile(path, tmp / name)
        result = SliceResult(
            out,
            str(source),
            revision_id,
            layer_map,
            len(kept),
            sum(e.nbytes for _, e in kept),
            sum(e - s for _, s, e in weights.ranges),
            weights.ranges,
        )
        _write_provenance(tmp, result, stacks, plan_arg, dtype)
        if check:
            from tinykit.slice.check import check_slice

            full = weights.folder or _download_full(weights)
            result.check = check_slice(full, tmp, layer_map, stacks)
    return result


def _new_folder(out: str | Path | None) -> Path:
    if out is None:
        raise UsageError("slice_model needs out=DIR, the folder to write. Pass a new folder path.")
    out = Path(out)
    if out.exists():
        raise UsageError(f"{out} already exists. Pass a new folder, or remove that one first.")
    return out


def _planned_config(
    weights: _Weights, source: str | Path, plan_arg: int | str | tuple[int, ...]
) -> tuple[dict, list[Stack]]:
    """The sliced config.json dict and its layer stacks (at least one)."""
    raw = read_json(weights.small_file("config.json"), f"config.json of {source}")
    if "model_type" not in raw:
        raise UsageError(f"config.json of {source} has no model_type. Fix the file.")
    config, stacks = plan_stacks(raw, plan_arg)
    if not stacks:
        raise UnsupportedModelError(
            f"{source}: model_type {raw['model_type']!r} has no layer count tinykit knows "
            "(num_hidden_layers, n_layer, ...). Nothing to slice; use make-tiny."
        )
    return config, stacks


def _write_config(tmp: Path, config: dict, target_dtype: str | None) -> None:
    """The sliced config.json, its dtype the converted one where the weights were converted."""
    if target_dtype is not None:
        config["dtype"] = {v: k for k, v in SAFETENSORS_CODES.items()}[target_dtype]
        config.pop("torch_dtype", None)
    (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from a file of the source; UsageError naming it when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{what} is not readable JSON ({e}). Fix or replace the file.") from None
    if not isinstance(data, dict):
        raise UsageError(
            f"{what} is a JSON {type(data).__name__}, not an object. Fix or replace the file."
        )
    return data


def _dtype_code(dtype: str | None) -> str | None:
    if dtype is None:
        return None
    name = dtype.removeprefix("torch.")
    if name not in SAFETENSORS_CODES:
        raise UsageError(
            f"--dtype {dtype!r} is not one tinykit converts to. Use one of "
            f"{', '.join(sorted(SAFETENSORS_CODES))}, or leave it out to keep the source's."
        )
    return SAFETENSORS_CODES[name]


def _small_files(weights: _Weights) -> dict[str, Path]:
    """Generation config, tokenizer and processor files (not config.json, not the index)."""
    names = [f for f in weights.small_names if f not in ("config.json", INDEX, "tinykit.json")]
    return {name: weights.small_file(name) for name in names}


def _local_revision(weights: _Weights) -> str:
    """sha256 over the config and the safetensors headers: the weights' identity, read cheaply."""
    digest = hashlib.sha256()
    assert weights.folder is not None
    digest.update((weights.folder / "config.json").read_bytes())
    for name in weights.weight_files:
        with open(weights.folder / name, "rb") as f:
            head = f.read(8)
            digest.update(name.encode() + b"\0" + head + f.read(header_length(head, name)))
    return "sha256:" + digest.hexdigest()


def _download_full(weights: _Weights) -> Path:
    from tinykit.hub import client

    assert weights.hub is not None
    return client.download_model(weights.hub, weights.revision)


def _write_provenance(
    folder: Path, result: SliceResult, stacks: list[Stack], layers: Any, dtype: str | None
) -> None:
    from tinykit.model.provenance import versions

    layer_arg = layers if not isinstance(layers, tuple) else ",".join(map(str, layers))
    command = f"tinykit slice {result.source} --layers {layer_arg}"
    if result.revision and not result.revision.startswith("sha256:"):
        command += f" --revision {result.revision}"
    if dtype:
        command += f" --dtype {dtype}"
    manifest = {
        "kind": "slice",
        "command": command,
        "source": result.source,
        "source_revision": result.revision,
        "layers": {f"{s.path}{s.depth_key}": list(s.kept) for s in stacks},
        "layer_map": result.layer_map,
        "dtype": dtype,
        "bytes_kept": result.bytes_kept,
        "bytes_fetched": result.bytes_fetched,
        "ranges": [list(r) for r in result.ranges],
        "versions": versions(),
    }
    (folder / "tinykit.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    kept = "\n".join(
        f"- `{s.path}{s.depth_key}`: source layers {list(s.kept)} of {s.depth}" for s in stacks
    )
    (folder / "README.md").write_text(
        f"---\nlibrary_name: transformers\ntags:\n- tinykit\n- slice\n---\n\n"
        f"# {Path(result.source).name} — {len(stacks[0].kept)}-layer slice\n\n"
        f"The real weights of `{result.source}` (revision `{result.revision}`), cut to these "
        f"layers:\n\n{kept}\n\nEvery tensor outside the layer stacks (embeddings, final norms, "
        "heads) is kept as is. Its outputs are the source model's computation over the kept "
        f"layers only, not the full model's. Rebuild with:\n\n```\n{command}\n```\n\n"
        f"Made with tinykit {__version__}.\n"
    )
