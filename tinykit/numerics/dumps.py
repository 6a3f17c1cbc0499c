"""The on-disk dump format of `tinykit.record(..., out=DIR)`: write it, read it, check it.

A dump is one folder (written under a temporary name and renamed into place, so a reader never
sees half of one)::

    manifest.json        format "tinykit-dump", version, model (class, fingerprint), options,
                         counts, shard files with their sizes, env.json's summary
    env.json             `tinykit env capture` of the recording process (versions, devices)
    index.jsonl          one line per record, in the order they completed: module, class, kind
                         (forward | grad | recompute | probe | input | params | loss), call, step,
                         parent, and per tensor its name, shape, dtype, hash, stats, and
                         (tensors="full", or a small input or loss) shard + key
    shards/NNNNN.safetensors   full tensors (tensors="full"), at most `shard_bytes` each

The model fingerprint hashes the parameter names and shapes (not values or dtypes), so a float32
and a bfloat16 run, or two package versions, compare; two different models do not. Recorded
without the model object, the fingerprint is the first root module's with parameters, taken
when the dump is closed. The tensors of a step's "input" and "loss" records are kept even in a
stats dump when they have at most `KEEP_VALUES_UP_TO` elements (token ids, labels, a loss), so
a diff can say how many elements of `labels` differ.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinykit.errors import UsageError
from tinykit.numerics.recorder import Recorder, Sink
from tinykit.numerics.stats import KEEP_VALUES_UP_TO
from tinykit.numerics.summary import INPUT, LOSS, RawTensors, Record, TensorSummary

if TYPE_CHECKING:
    import torch

FORMAT = "tinykit-dump"
VERSION = 1
SHARD_BYTES = 64 << 20

_SUMMARY_FIELDS = (
    "name",
    "shape",
    "dtype",
    "hash",
    "mean",
    "std",
    "absmax",
    "absmin",
    "min",
    "max",
    "nonzero_absmin",
    "nan",
    "posinf",
    "neginf",
    "zeros",
)


def model_fingerprint(model: torch.nn.Module | None) -> dict[str, Any]:
    digest = hashlib.blake2b(digest_size=16)
    count = 0
    if model is None:  # recorded without a model, and no module with parameters was called
        return {"class": None, "fingerprint": digest.hexdigest(), "parameters": 0}
    for name, p in model.named_parameters():
        digest.update(f"{name}:{tuple(p.shape)};".encode())
        count += p.numel()
    return {"class": type(model).__name__, "fingerprint": digest.hexdigest(), "parameters": count}


def _tensor_entry(s: TensorSummary) -> dict[str, Any]:
    entry = {k: getattr(s, k) for k in _SUMMARY_FIELDS}
    entry["shape"] = list(s.shape)
    return entry


class DumpWriter(Sink):
    """Writes each record a `Recorder` makes into a dump folder; `close()` moves it into place."""

    def __init__(
        self,
        out: str | os.PathLike[str],
        model: torch.nn.Module | None,
        tensors: str,
        max_bytes: int | None,
        options: dict[str, Any],
        shard_bytes: int = SHARD_BYTES,
    ) -> None:
        self.out = Path(out)
        if self.out.exists() and (not self.out.is_dir() or any(self.out.iterdir())):
            raise UsageError(
                f"record(out='{self.out}'): the folder exists and is not empty. Pass a new folder "
                "or remove it."
            )
        if not self.out.parent.is_dir():
            raise UsageError(
                f"record(out='{self.out}'): its parent folder does not exist. Create it first."
            )
        self.full = tensors == "full"
        self.max_bytes, self.shard_bytes = max_bytes, shard_bytes
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", dir=self.out.parent))
        (self.tmp / "shards").mkdir()
        self.index = (self.tmp / "index.jsonl").open("w")
        self.manifest: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "options": options,
        }
        if model is not None:
            self.manifest["model"] = model_fingerprint(model)

        self.records = self.written_bytes = self.dropped = 0
        self.truncated = False
        self.shards: dict[str, int] = {}
        self._pending: dict[str, torch.Tensor] = {}
        self._pending_bytes = 0

    def _shard_name(self) -> str:
        return f"shards/{len(self.shards):05d}.safetensors"

    def _flush(self) -> None:
        if not self._pending:
            return
        from safetensors.torch import save_file

        name = self._shard_name()
        save_file(self._pending, str(self.tmp / name))
        self.shards[name] = (self.tmp / name).stat().st_size
        self._pending, self._pending_bytes = {}, 0

    def on_record(self, rec: Recorder, record: Record, tensors: RawTensors) -> None:
        if "model" not in self.manifest and rec.main_root is not None:
            # recorded without the model object: the model is known once it has been called
            # (and may be gone by the time the dump is closed)
            self.manifest["model"] = model_fingerprint(rec.main_root)
        if self.truncated:
            self.dropped += 1
            return
        entry: dict[str, Any] = {
            "seq": record.seq,
            "module": record.module,
            "class": record.cls,
            "kind": record.kind,
            "call": record.call,
            "step": record.step,
            "parent": record.parent,
        }
        cost = 0
        keep_small = record.kind in (INPUT, LOSS)
        for side, summaries, raw in (
            ("inputs", record.inputs, tensors[0]),
            ("outputs", record.outputs, tensors[1]),
            ("params", record.params, []),
        ):
            items = []
            for i, s in enumerate(summaries):
                item = _tensor_entry(s)
                if i < len(raw) and (
                    self.full or (keep_small and raw[i][1].numel() <= KEEP_VALUES_UP_TO)
                ):
                    t = raw[i][1].detach().to("cpu").contiguous().clone()
                    key = f"{record.seq}.{side}.{i}"
                    item["shard"], item["key"] = self._shard_name(), key
                    self._pending[key] = t
                    self._pending_bytes += t.numel() * t.element_size()
                    cost += t.numel() * t.element_size()
                items.append(item)
            entry[side] = items
        line = json.dumps(entry, allow_nan=True) + "\n"
        cost += len(line)
        if self.max_bytes is not None and self.written_bytes + cost > self.max_bytes:
            # over budget: this record and every later one are left out (marked in the manifest)
            for side in ("inputs", "outputs"):
                for item in entry[side]:
                    self._pending.pop(item.get("key", ""), None)
            self.truncated, self.dropped = True, self.dropped + 1
            return
        self.index.write(line)
        self.written_bytes += cost
        self.records += 1
        if self._pending_bytes >= self.shard_bytes:
            self._flush()

    def close(self, error: BaseException | None = None) -> Path:
        """Finish the folder and rename it into place (also after an error: a dump of the run
        that raised is what one wants to read; the manifest names the error)."""
        from tinykit.repro.env import to_json

        self._flush()
        self.index.close()
        self.manifest.setdefault("model", model_fingerprint(None))
        env = _environment()
        (self.tmp / "env.json").write_text(to_json(env))
        self.manifest.update(
            records=self.records,
            dropped_records=self.dropped,
            truncated=self.truncated,
            bytes=self.written_bytes,
            shards=self.shards,
            error=None if error is None else f"{type(error).__name__}: {error}".splitlines()[0],
            versions={k: env["packages"].get(k) for k in ("torch", "transformers", "tinykit")},
        )
        (self.tmp / "manifest.json").write_text(json.dumps(self.manifest, indent=1, sort_keys=True))
        if self.out.exists():
            self.out.rmdir()  # empty, checked at the start
        os.replace(self.tmp, self.out)
        return self.out

    def abandon(self) -> None:
        self.index.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


@functools.cache
def _environment() -> dict[str, Any]:
    """`tinykit env capture`, once per process: it takes seconds (packages, git state)."""
    from tinykit.repro.env import capture

    return capture()


# -- reading ----------------------------------------------------------------------------------


@dataclass
class Dump:
    """A dump read back: its manifest and index records (tensors load on demand)."""

    path: Path
    manifest: dict[str, Any]
    records: list[dict[str, Any]]
    _open: dict[str, Any] = field(default_factory=dict, repr=False)

    def tensor(self, item: dict[str, Any]) -> torch.Tensor | None:
        """The full tensor of an index entry, or None when the dump holds stats only."""
        if "key" not in item:
            return None
        from safetensors import SafetensorError, safe_open

        shard = item["shard"]
        try:
            if shard not in self._open:
                self._open[shard] = safe_open(str(self.path / shard), framework="pt")
            return self._open[shard].get_tensor(item["key"])
        except (SafetensorError, OSError) as e:  # the right size, the wrong bytes
            raise UsageError(
                f"'{self.path / shard}' does not hold tensor {item['key']!r} readably ({e}). "
                "Record the run again, or copy the whole dump folder."
            ) from None


def _not_a_dump(path: Path, why: str) -> UsageError:
    return UsageError(
        f"'{path}' is not a tinykit dump: {why}. Pass a folder written by "
        "tinykit.record(model, out=DIR)."
    )


def read_dump(path: str | os.PathLike[str]) -> Dump:
    """Read and check a dump folder.

    Raises:
        UsageError: not a dump, a newer format version, a truncated index or shard.
    """
    path = Path(path)
    if not path.is_dir():
        raise _not_a_dump(path, "no such folder")
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except FileNotFoundError:
        raise _not_a_dump(path, "it has no manifest.json") from None
    except (OSError, ValueError) as e:
        raise _not_a_dump(path, f"its manifest.json does not parse ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _not_a_dump(path, f"manifest.json does not say format '{FORMAT}'")
    if not isinstance(manifest.get("version"), int) or manifest["version"] > VERSION:
        raise UsageError(
            f"'{path}' is a dump of format version {manifest.get('version')}, newer than this "
            f"tinykit reads ({VERSION}). Upgrade tinykit to compare it."
        )
    try:
        lines = (path / "index.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
    except FileNotFoundError:
        raise _not_a_dump(path, "it has no index.jsonl") from None
    except ValueError:
        raise UsageError(
            f"'{path}/index.jsonl' is truncated or corrupt (a line does not parse). Record the "
            "run again."
        ) from None
    if len(records) != manifest.get("records"):
        raise UsageError(
            f"'{path}/index.jsonl' holds {len(records)} records but the manifest says "
            f"{manifest.get('records')}: the dump is truncated. Record the run again."
        )
    shards = manifest.get("shards") or {}
    _check_manifest(path, manifest, shards)
    for n, record in enumerate(records, 1):
        _check_record(path, n, record, shards)
    for shard, size in shards.items():
        file = path / shard
        actual = file.stat().st_size if file.is_file() else None
        if actual != size:
            raise UsageError(
                f"'{file}' is truncated or missing ({actual} of {size} bytes). Record the run "
                "again, or copy the whole dump folder."
            )
    return Dump(path, manifest, records)


# -- checking what was read: a hand-edited or foreign dump is a usage error, never a crash ----

_TENSOR_FIELDS = {"name": str, "shape": list, "dtype": str}
_RECORD_FIELDS = {"module": str, "kind": str, "call": int, "step": int, "inputs": list}


def _check_manifest(path: Path, manifest: dict[str, Any], shards: Any) -> None:
    def bad(why: str) -> UsageError:
        return UsageError(f"'{path}/manifest.json': {why}. Record the run again.")

    if not isinstance(manifest.get("model"), dict):
        raise bad("field 'model' must be an object (class, fingerprint, parameters)")
    if not isinstance(manifest.get("records"), int) or isinstance(manifest["records"], bool):
        raise bad(f"field 'records' must be a count, got {manifest.get('records')!r}")
    if not isinstance(shards, dict):
        raise bad(f"field 'shards' must map shard files to sizes, got {type(shards).__name__}")
    for shard, size in shards.items():
        parts = Path(shard).parts
        if Path(shard).is_absolute() or ".." in parts or not parts:
            raise bad(f"shard {shard!r} is not a file inside the dump")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise bad(f"shard {shard!r} has size {size!r}, not a byte count")


def _check_record(path: Path, n: int, record: Any, shards: dict[str, Any]) -> None:
    def bad(why: str) -> UsageError:
        return UsageError(
            f"'{path}/index.jsonl' line {n}: {why}. The dump is corrupt: record the run again."
        )

    if not isinstance(record, dict):
        raise bad(f"a record must be an object, got {type(record).__name__}")
    for key, kind in (*_RECORD_FIELDS.items(), ("outputs", list)):
        value = record.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise bad(f"field {key!r} must be a JSON {_JSON[kind]}, got {value!r:.60}")
    if not isinstance(record.get("class", ""), str):
        raise bad("field 'class' must be a string")
    for side in ("inputs", "outputs", "params"):
        for i, item in enumerate(record.get(side) or []):
            where = f"{side}[{i}]"
            if not isinstance(item, dict):
                raise bad(f"{where} must be an object")
            for key, kind in _TENSOR_FIELDS.items():
                if not isinstance(item.get(key), kind):
                    raise bad(f"{where}.{key} must be a JSON {_JSON[kind]}")
            if not all(isinstance(d, int) and not isinstance(d, bool) for d in item["shape"]):
                raise bad(f"{where}.shape must be a list of integers")
            if missing := [k for k in _SUMMARY_FIELDS if k not in item]:
                raise bad(f"{where} lacks {', '.join(missing[:3])}")
            shard = item.get("shard")
            if "key" in item and (
                not isinstance(item["key"], str)
                or not isinstance(shard, str)
                or shard not in shards
            ):
                raise bad(f"{where} names shard {item.get('shard')!r}, not one of the manifest's")


_JSON = {str: "string", int: "integer", list: "list", dict: "object"}
