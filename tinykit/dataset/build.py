"""`make_tiny_dataset`: a few representative rows of every config and split, media shrunk.

Pipeline: resolve the source (source.py) -> check every requested config and split exists
before reading any row -> stream a bounded pool of rows per split -> pick representative rows
(select.py) -> shrink their media (media.py) -> write parquet + card atomically (write.py).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path

from tinykit._files import check_target, output_path
from tinykit.dataset import source as sources
from tinykit.dataset.media import shrink_row
from tinykit.dataset.select import pick_rows
from tinykit.dataset.write import MAX_ROWS, Card, DatasetResult, Split, write_dataset
from tinykit.errors import UsageError

DEFAULT_ROWS = 20
# Rows are picked from the first POOL_FACTOR * rows rows of each split (at least MIN_POOL):
# enough variety to find short, long, empty and media-less records, while a large parquet
# source is read only for the row groups those rows live in.
POOL_FACTOR = 5
MIN_POOL = 200


def make_tiny_dataset(
    source: str | os.PathLike[str] | list[str | os.PathLike[str]],
    out: str | os.PathLike[str] | None = None,
    *,
    rows: int = DEFAULT_ROWS,
    configs: list[str] | None = None,
    splits: list[str] | None = None,
    revision: str | None = None,
    display_source: str | None = None,
    force: bool = False,
) -> DatasetResult:
    """Write a tiny copy of `source` (Hub id, folder, or data files) with `rows` rows per split.

    Keeps every config and split (or only `configs`/`splits`) and their exact Features; images
    end up <= 32 px on the long side and audio <= 1 s. Returns the result, whose `path`
    `datasets.load_dataset(str(result))` loads. `out` must be missing or empty unless `force`;
    `display_source` is how the card names the source (default: as given). Raises UsageError
    (nothing written) for an unknown config or split, rows <= 0, an unsupported format or
    unreadable media.
    """
    if isinstance(rows, bool) or not isinstance(rows, int) or rows <= 0:
        raise UsageError(f"rows={rows!r} is not a positive integer. Pass --rows 1 or more.")
    if rows > MAX_ROWS:  # tiny datasets: more is a typo, and would read or draw for minutes
        raise UsageError(
            f"rows={rows} is over the limit of {MAX_ROWS}. Pass --rows {MAX_ROWS} or fewer."
        )
    out = output_path(out, f"tiny-{_name_of(source)}")
    check_target(out, force)
    src = sources.resolve(source, revision)  # type: ignore[arg-type]  # PathLike accepted
    if display_source is not None:
        src = dataclasses.replace(src, spec=str(display_source))
    builders = {
        config: sources.open_config(src, config)
        for config in _choose(configs, sources.config_names(src), "config", src.spec)
    }
    plan = {
        config: _choose(splits, sources.split_names(b), "split", f"{src.spec} config {config!r}")
        for config, b in builders.items()
    }
    pool = max(POOL_FACTOR * rows, MIN_POOL)
    tables = {
        config: _tiny_config(builders[config], names, rows, pool) for config, names in plan.items()
    }
    card = Card(
        title=f"tiny-{_name_of(source)}",
        source=src.spec,
        revision=src.revision,
        command=_rebuild_command(src, rows, configs, splits, out),
        selection=(
            f"Each split keeps {rows} rows picked from its first {pool}: the shortest, the longest "
            "and the typical record, records with empty or missing fields and with and without "
            "media, one record per class label, then rows spread over the size range. Images are "
            "at most 32 px on the long side, audio clips at most 1 s."
        ),
        extra_yaml={"license": lic} if (lic := sources.license_of(src)) else {},
    )
    return write_dataset(out, tables, card, force)


def _tiny_config(builder, split_names: list[str], rows: int, pool: int) -> list[Split]:
    pools = {name: sources.stream_rows(builder, name, pool) for name in split_names}
    declared = next(iter(pools.values()))[0] if pools else None
    features = declared or sources.infer_features(
        [row for _, candidates in pools.values() for row in candidates],
        f"Config {builder.config.name!r}",
    )
    tiny = []
    for name, (_, candidates) in pools.items():
        keep = pick_rows(candidates, features, rows)
        tiny.append(Split(name, features, [shrink_row(candidates[i], features) for i in keep]))
    return tiny


def _choose(wanted: list[str] | None, available: list[str], what: str, where: str) -> list[str]:
    if not available:
        raise UsageError(f"{where} has no {what}s with data files. Check the source's layout.")
    if not wanted:
        return available
    unknown = [w for w in wanted if w not in available]
    if unknown:
        raise UsageError(
            f"Unknown {what} {', '.join(map(repr, unknown))} in {where}. "
            f"Available: {', '.join(available)}. Pass one of these with --{what}."
        )
    return list(dict.fromkeys(wanted))


def _name_of(source) -> str:
    first = source[0] if isinstance(source, (list, tuple)) else source
    path = Path(str(first))
    return (path.stem if path.suffix else path.name) or "dataset"


def _rebuild_command(src, rows, configs, splits, out: Path) -> str:
    argv = ["tinykit", "make-tiny-dataset", *src.spec.split(" "), "--rows", str(rows)]
    for config in configs or []:
        argv += ["--config", config]
    for split in splits or []:
        argv += ["--split", split]
    if src.revision:
        argv += ["--revision", src.revision]
    return shlex.join([*argv, "-o", out.name])
