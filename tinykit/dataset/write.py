"""Write a tiny dataset: one parquet file per config and split, plus a README.md card.

The card's YAML declares every config with its split files and its exact Features, so
`datasets.load_dataset(out)` (or `out` pushed to the Hub) gives back the same configs, splits
and features with no loading script. Everything is written into a temporary folder next to
`out` and renamed into place at the end: a failure leaves nothing half-written. No timestamps
or absolute paths go into the files, so the same rows give byte-identical output.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinykit._files import FolderResult, output_errors, replace_folder
from tinykit.errors import UsageError

MAX_ROWS = 10_000  # rows per split: the bound of make-tiny-dataset and make-synthetic-dataset


@dataclass
class Split:
    name: str
    features: Any
    rows: list[dict]
    num_bytes: int = 0
    """In-memory Arrow size, as `datasets` reports it in the card; set when written."""


@dataclass
class Card:
    """What the README says about where the rows came from and how to rebuild them."""

    title: str
    source: str
    revision: str | None
    command: str
    selection: str
    extra_yaml: dict = field(default_factory=dict)


def data_path(config: str, split: str) -> str:
    folder = "data" if config == "default" else config
    return f"{folder}/{split}-00000-of-00001.parquet"


def write_dataset(
    out: Path, configs: dict[str, list[Split]], card: Card, force: bool
) -> DatasetResult:
    """Write every config/split and the card into `out`, atomically (see tinykit._files)."""
    with output_errors(out), replace_folder(out, force=force) as tmp:
        for config, splits in configs.items():
            for split in splits:
                split.num_bytes = _write_parquet(tmp / data_path(config, split.name), split)
        (tmp / "README.md").write_text(render_card(configs, card), encoding="utf-8")
    rows = {config: {s.name: len(s.rows) for s in by} for config, by in configs.items()}
    return DatasetResult(out, rows)


def _write_parquet(path: Path, split: Split) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    # Rows are already in storage form (media as {"bytes", "path"}, labels as ints), so they go
    # straight to Arrow: `Features.encode_example` would need torchcodec just to pass audio bytes
    # through. The schema metadata carries the exact Features (ClassLabel names, Image, Audio).
    try:
        table = pa.Table.from_pylist(split.rows, schema=split.features.arrow_schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        raise UsageError(
            f"Rows of split {split.name!r} do not fit their features: {e}. "
            "Check that every row matches the source's schema."
        ) from e
    pq.write_table(table, path, row_group_size=max(1, len(split.rows)))
    return table.nbytes


def render_card(configs: dict[str, list[Split]], card: Card) -> str:
    import yaml

    meta: dict[str, Any] = {
        "configs": [
            {
                "config_name": config,
                "data_files": [
                    {"split": s.name, "path": data_path(config, s.name)} for s in splits
                ],
                **({"default": True} if len(configs) > 1 and i == 0 else {}),
            }
            for i, (config, splits) in enumerate(configs.items())
        ],
        "dataset_info": [
            {
                "config_name": config,
                "features": splits[0].features._to_yaml_list(),
                "splits": [
                    {"name": s.name, "num_bytes": s.num_bytes, "num_examples": len(s.rows)}
                    for s in splits
                ],
            }
            for config, splits in configs.items()
            if splits
        ],
        "tags": ["tinykit", "testing"],
        **card.extra_yaml,
    }
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=100)
    table = "\n".join(
        f"| {config} | {s.name} | {len(s.rows)} |"
        for config, splits in configs.items()
        for s in splits
    )
    revision = f" at revision `{card.revision}`" if card.revision else ""
    return (
        f"---\n{front}---\n\n# {card.title}\n\n"
        f"A tiny dataset for tests, made by tinykit from `{card.source}`{revision}. "
        "It has the same configs, splits and features as its source, with very few rows: "
        "use it to make an epoch finish in a few steps, not to measure quality.\n\n"
        f"{card.selection}\n\n"
        f"| config | split | rows |\n|---|---|---|\n{table}\n\n"
        f"## Rebuild\n\n```bash\n{card.command}\n```\n"
    )


@dataclass(frozen=True)
class DatasetResult(FolderResult):
    """What a dataset builder wrote; `to_dict()` is the CLI's --json output. Stands in for `path`."""

    path: Path
    splits: dict[str, dict[str, int]]
    """Rows written, by config and split."""

    @property
    def text(self) -> str:
        lines = [f"wrote {self.path}"]
        lines += [f"  {c}/{s}: {n} rows" for c, by in self.splits.items() for s, n in by.items()]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"path": os.fspath(self.path), "splits": self.splits, "text": self.text}
