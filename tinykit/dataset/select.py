"""Pick rows deterministically and representatively, not just the head.

From a pool of candidate rows, the picks come in this order until `n` are chosen:
the shortest and the longest row; a row with a missing (None) field, one with an empty
("" or []) field, and one with every field filled; for each media column a row with media
and one without; one row per `ClassLabel` value (so every label present in the pool
survives); the typical (median-size) row; then rows spread evenly over the size range.
The chosen rows keep their pool order. No randomness: the same pool gives the same picks.
"""

from __future__ import annotations

from typing import Any

from tinykit.dataset.media import has_media


def pick_rows(rows: list[dict], features: Any, n: int) -> list[int]:
    """Indices into `rows` of the `n` rows to keep, ascending."""
    if n >= len(rows):
        return list(range(len(rows)))
    sizes = [_size(row) for row in rows]
    by_size = sorted(range(len(rows)), key=lambda i: (sizes[i], i))
    chosen: dict[int, None] = {}  # an ordered set

    def take(i: int | None) -> None:
        if i is not None and len(chosen) < n:
            chosen.setdefault(i)

    take(by_size[0])
    take(by_size[-1])
    gaps = [_gaps(row) for row in rows]
    take(_first(i for i in by_size if "missing" in gaps[i]))
    take(_first(i for i in by_size if "empty" in gaps[i]))
    take(_first(i for i in by_size if not gaps[i]))
    for name, feature in features.items():
        if _is_media_column(feature):
            present = [has_media(row.get(name), feature) for row in rows]
            take(_first(i for i in range(len(rows)) if present[i]))
            take(_first(i for i in range(len(rows)) if not present[i]))
    for name, feature in features.items():
        if type(feature).__name__ == "ClassLabel":
            first_of: dict[Any, int] = {}
            for i, row in enumerate(rows):
                first_of.setdefault(row.get(name), i)
            for label in sorted(first_of, key=lambda v: (v is None, v if v is not None else 0)):
                take(first_of[label])
    take(by_size[len(by_size) // 2])
    _spread(by_size, chosen, n)
    return sorted(chosen)


def _spread(by_size: list[int], chosen: dict[int, None], n: int) -> None:
    """Fill up with rows at evenly spaced size quantiles, skipping ones already chosen."""
    remaining = [i for i in by_size if i not in chosen]
    want = n - len(chosen)
    if want <= 0 or not remaining:
        return
    step = len(remaining) / want
    for k in range(want):
        chosen.setdefault(remaining[int(k * step + step / 2)])


def _is_media_column(feature: Any) -> bool:
    from tinykit.dataset.media import contains_media

    return contains_media(feature)


def _first(indices) -> int | None:
    return next(iter(indices), None)


def _size(value: Any) -> int:
    """How big a record reads: characters of text, bytes of binary, and one per scalar."""
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, dict):
        return sum(_size(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_size(v) for v in value)
    return 1


def _gaps(value: Any) -> set[str]:
    """Which kinds of holes a record has: "missing" (None) and/or "empty" ("" or [])."""
    if value is None:
        return {"missing"}
    if value == "" or value == []:
        return {"empty"}
    if isinstance(value, dict):
        # an undecoded media dict with bytes or a path is a filled value
        if set(value) == {"bytes", "path"}:
            return set() if value["bytes"] is not None or value["path"] else {"missing"}
        return set().union(*(_gaps(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_gaps(v) for v in value))
    return set()
