"""Safetensors weights read tensor by tensor and written as a stream: what `slice` moves.

Headers are read alone (8 bytes of length, then the JSON), from a local file or through two
HTTP Range requests, so a slice knows every tensor's bytes before it fetches any. The kept
tensors are then read in file order, adjacent ones coalesced into one range, and written
straight into the output shards, whose headers are known up front. Peak memory is one chunk
(raw copy) or one tensor (dtype conversion), never a shard.

The writer is hand-written because the safetensors package can only save a dict of tensors
already in memory; the format itself is 8 bytes of header length, the JSON header, the data.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from tinykit.errors import UsageError

DTYPE_SIZE = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
FLOAT_DTYPES = {"F16", "BF16", "F32", "F64"}
TORCH_NAMES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}
SAFETENSORS_CODES = {v: k for k, v in TORCH_NAMES.items()}


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a source file; `start`/`end` are absolute byte offsets in that file."""

    name: str
    file: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    def out_nbytes(self, dtype: str | None) -> int:
        if dtype is None or self.dtype not in FLOAT_DTYPES:
            return self.nbytes
        return self.nbytes // DTYPE_SIZE[self.dtype] * DTYPE_SIZE[dtype]


def header_length(prefix: bytes, file: str, size: int | None = None) -> int:
    """The header length the first 8 bytes declare; `size`, when known, is the file's (`file`
    is its name in messages)."""
    if len(prefix) < 8:
        raise UsageError(f"{file} is not a safetensors file (shorter than 8 bytes). Replace it.")
    n = struct.unpack("<Q", prefix[:8])[0]
    if n > 100 * 1024 * 1024:
        raise UsageError(
            f"{file} declares a {n}-byte safetensors header: not a safetensors file. Replace it."
        )
    if size is not None and 8 + n > size:
        raise UsageError(
            f"{file} declares a {n}-byte safetensors header but has {size} bytes: the file is "
            "truncated. Download or save it again."
        )
    return n


def parse_header(
    raw: bytes, file: str, size: int | None = None, *, where: str | None = None
) -> list[TensorEntry]:
    """The entries of a header whose JSON is `raw` (data starts at 8 + len(raw)), each checked:
    a known dtype, a shape of counts, offsets that span exactly its bytes and, when the file's
    `size` is known, lie inside the file. A UsageError names the file (`where`, else `file`),
    tensor and field."""
    shown = where or file
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{shown} has a malformed safetensors header ({e}). Replace it.") from e
    if not isinstance(header, dict):
        raise UsageError(
            f"{shown}: its safetensors header is a JSON {type(header).__name__}, not an object "
            "of tensors. Replace the file."
        )
    base = 8 + len(raw)
    return [
        _entry(name, v, file, base, size, shown)
        for name, v in header.items()
        if name != "__metadata__"
    ]


def _is_shape(shape: Any) -> TypeGuard[list[int]]:
    return isinstance(shape, list) and all(_count(d) for d in shape)


def _is_span(offsets: Any) -> TypeGuard[list[int]]:
    """`[start, end]`, two counts with start <= end."""
    return (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(_count(o) for o in offsets)
        and offsets[0] <= offsets[1]
    )


def _entry(name: str, v: Any, file: str, base: int, size: int | None, shown: str) -> TensorEntry:
    def bad(why: str) -> UsageError:
        return UsageError(f"{shown}: tensor {name!r} {why}. The file is corrupt: replace it.")

    if not isinstance(v, dict):
        raise bad("is not an object with dtype, shape and data_offsets")
    dtype, shape, offsets = v.get("dtype"), v.get("shape"), v.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZE:
        raise bad(f"has dtype {dtype!r}, not one of {', '.join(DTYPE_SIZE)}")
    if not _is_shape(shape):
        raise bad(f"has shape {shape!r}, not a list of counts")
    if not _is_span(offsets):
        raise bad(f"has data_offsets {offsets!r}, not [start, end] with 0 <= start <= end")
    need = math.prod(shape) * DTYPE_SIZE[dtype]
    if offsets[1] - offsets[0] != need:
        raise bad(
            f"has data_offsets spanning {offsets[1] - offsets[0]} bytes, but its shape "
            f"{shape} of {dtype} needs {need}"
        )
    if size is not None and base + offsets[1] > size:
        raise UsageError(
            f"{shown}: tensor {name!r} ends at byte {base + offsets[1]} but the file has {size} "
            "bytes: the file is truncated. Download or save it again."
        )
    return TensorEntry(name, file, dtype, tuple(shape), base + offsets[0], base + offsets[1])


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def coalesce(entries: list[TensorEntry]) -> list[tuple[str, int, int, list[TensorEntry]]]:
    """(file, start, end, entries) ranges: entries in file order, byte-adjacent ones merged."""
    ranges: list[tuple[str, int, int, list[TensorEntry]]] = []
    for e in sorted(entries, key=lambda e: (e.file, e.start)):
        if ranges and ranges[-1][0] == e.file and ranges[-1][2] == e.start:
            file, start, _, group = ranges[-1]
            ranges[-1] = (file, start, e.end, [*group, e])
        else:
            ranges.append((e.file, e.start, e.end, [e]))
    return ranges


Pieces = Iterator[tuple[TensorEntry, Any]]
"""(entry, buffer) pieces, in coalesced order; an entry's pieces add up to its bytes."""


def split_stream(chunks: Iterator[bytes], entries: list[TensorEntry]) -> Pieces:
    """Cut one range's byte stream at the tensor boundaries, without copying whole tensors."""
    queue = iter(entries)
    entry = next(queue)
    left = entry.nbytes
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            while left == 0:
                entry = next(queue)
                left = entry.nbytes
            take = view[:left]
            yield entry, take
            left -= len(take)
            view = view[len(take) :]


def local_pieces(folder: Path, entries: list[TensorEntry]) -> Pieces:
    """Kept tensors of a local folder, one at a time, through safetensors' `safe_open`."""
    import torch
    from safetensors import SafetensorError, safe_open

    for file, _, _, group in coalesce(entries):
        for e in group:
            # Opened per tensor: the file's mapped pages leave the RSS once each tensor is read.
            try:
                with safe_open(folder / file, framework="pt") as f:
                    tensor = f.get_tensor(e.name)
            except SafetensorError as err:  # checks this reader's header check leaves to it
                raise UsageError(
                    f"{folder / file} is not a valid safetensors file ({err}). Replace it."
                ) from None
            if tensor.numel():
                yield e, tensor.reshape(-1).view(torch.uint8).numpy().data
            del tensor


@dataclass
class Shard:
    name: str
    entries: list[tuple[str, TensorEntry]]  # (output name, source entry), in write order
    header: bytes


class ShardWriter:
    """Plans the output shards of a stream of kept tensors and writes the pieces into them."""

    def __init__(
        self,
        folder: Path,
        kept: list[tuple[str, TensorEntry]],
        max_shard_bytes: int,
        dtype: str | None = None,
    ) -> None:
        self.folder, self.dtype = folder, dtype
        groups: list[list[tuple[str, TensorEntry]]] = [[]]
        size = 0
        for item in kept:  # `kept` is in coalesced (fetch) order: shards are runs of it
            n = item[1].out_nbytes(dtype)
            if groups[-1] and size + n > max_shard_bytes:
                groups.append([])
                size = 0
            groups[-1].append(item)
            size += n
        total = len(groups)
        names = (
            ["model.safetensors"]
            if total == 1
            else [f"model-{i + 1:05d}-of-{total:05d}.safetensors" for i in range(total)]
        )
        self.shards = [Shard(n, g, self._header(g)) for n, g in zip(names, groups, strict=True)]
        self._shard_of = {id(e): s for s in self.shards for _, e in s.entries}

    def _header(self, group: list[tuple[str, TensorEntry]]) -> bytes:
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name, e in group:
            n = e.out_nbytes(self.dtype)
            dtype = self.dtype if self.dtype and e.dtype in FLOAT_DTYPES else e.dtype
            header[name] = {
                "dtype": dtype,
                "shape": list(e.shape),
                "data_offsets": [offset, offset + n],
            }
            offset += n
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # the format pads the header so the data is 8-aligned
        return struct.pack("<Q", len(raw)) + raw

    def write(self, pieces: Pieces) -> None:
        """Write every piece; tensors of no bytes get none, so each shard is finished in turn."""
        convert = self._converter()
        for shard in self.shards:
            with open(self.folder / shard.name, "wb") as out:
                out.write(shard.header)
                for e in [e for _, e in shard.entries if e.nbytes]:
                    if convert and e.dtype in FLOAT_DTYPES and e.dtype != self.dtype:
                        out.write(convert(_read_whole(e, pieces), e.dtype))
                        continue
                    for buf in _tensor_pieces(e, pieces):
                        out.write(buf)

    def _converter(self) -> Callable[[bytearray, str], bytes] | None:
        if self.dtype is None:
            return None
        import torch

        target = getattr(torch, TORCH_NAMES[self.dtype])

        def convert(buf: bytearray, dtype: str) -> bytes:
            src = torch.frombuffer(buf, dtype=getattr(torch, TORCH_NAMES[dtype]))
            return src.to(target).view(torch.uint8).numpy().tobytes()

        return convert

    def index(self) -> dict[str, Any] | None:
        """model.safetensors.index.json for a sharded output (None for one file)."""
        if len(self.shards) == 1:
            return None
        total = sum(e.out_nbytes(self.dtype) for s in self.shards for _, e in s.entries)
        weight_map = {name: s.name for s in self.shards for name, _ in s.entries}
        return {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}


def _tensor_pieces(e: TensorEntry, pieces: Pieces) -> Iterator[Any]:
    """The next pieces of `pieces`, up to the bytes of tensor `e`."""
    got = 0
    while got < e.nbytes:
        entry, buf = next(pieces, (None, b""))
        if entry is None:  # the source ended early (a shorter file on the Hub)
            raise UsageError(
                f"{e.file} ended before tensor {e.name!r} was read whole: the "
                "source file is truncated. Fix the source and slice again."
            )
        if entry is not e:
            raise RuntimeError(f"stream out of order: {entry.name} for {e.name}")
        yield buf
        got += len(buf)


def _read_whole(e: TensorEntry, pieces: Pieces) -> bytearray:
    """The bytes of tensor `e` in one buffer (to convert its dtype)."""
    whole = bytearray(e.nbytes)
    got = 0
    for buf in _tensor_pieces(e, pieces):
        whole[got : got + len(buf)] = buf
        got += len(buf)
    return whole
