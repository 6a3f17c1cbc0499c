"""Render a `DumpDiff` for people: a self-contained HTML page, and a PNG of the error by layer.

Both files are written to a temporary name beside the target and renamed into place. The plot
needs matplotlib (`pip install 'tinykit[plot]'`); without it `plot_diff` raises a SetupError
with that command, and nothing is written.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import TYPE_CHECKING

from tinykit._files import atomic_file
from tinykit.errors import SetupError, UsageError
from tinykit.numerics.summary import FORWARD

if TYPE_CHECKING:
    from tinykit.numerics.diff import DumpDiff

_COLORS = {
    "match": "#e8f5e9",
    "root": "#ff8a80",
    "contains-root": "#ffe0b2",
    "downstream": "#fff9c4",
    "differs": "#ffccbc",
}


def _atomic_write(path: Path, write) -> Path:
    if not path.parent.is_dir():
        raise UsageError(f"'{path}': its folder does not exist. Create it or pick another path.")
    with atomic_file(path) as tmp:  # whole or not at all; OS errors are SetupErrors
        write(tmp)
    return path


def write_html(result: DumpDiff, path: str | os.PathLike[str]) -> Path:
    """One table, one row per aligned record in execution order, the root cause highlighted."""
    summary = html.escape(result.text().split("\n", 1)[0])
    rows = []
    for r in result.rows:
        cells = [
            r.status,
            "-" if r.max_abs is None else f"{r.max_abs:.3g}",
            "-" if r.max_rel is None else f"{r.max_rel:.3g}",
            r.module,
            r.cls,
            r.kind,
            str(r.call),
            str(r.step),
            r.detail,
        ]
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        rows.append(f'<tr style="background:{_COLORS.get(r.status, "#fff")}">{tds}</tr>')
    extra = "".join(
        f"<p>only in {side}: {html.escape(', '.join(items))}</p>"
        for side, items in (("a", result.only_in_a), ("b", result.only_in_b))
        if items
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "status",
            "max abs",
            "max rel",
            "module",
            "class",
            "kind",
            "call",
            "step",
            "detail",
        )
    )
    page = (
        "<!doctype html><meta charset='utf-8'><title>tinykit dumps diff</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 6px;font-size:13px;"
        "text-align:left}</style>"
        f"<h1>tinykit dumps diff</h1><p>a: {html.escape(result.a)}<br>b: "
        f"{html.escape(result.b)}</p><p><b>{summary}</b></p>{extra}"
        f"<table><tr>{head}</tr>{''.join(rows)}</table>"
    )
    return _atomic_write(Path(path), lambda tmp: tmp.write_text(page))


def plot_diff(result: DumpDiff, path: str | os.PathLike[str]) -> Path:
    """A PNG: the max abs error of each forward record in execution order, root cause marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SetupError(
            "--plot needs matplotlib, which is not installed. Run: pip install 'tinykit[plot]' "
            "(or use --html)."
        ) from None
    rows = [r for r in result.rows if r.kind == FORWARD]
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.25), 4))
    errors = [r.max_abs or 0.0 for r in rows]
    colors = [_COLORS.get(r.status, "#ccc") for r in rows]
    ax.bar(range(len(rows)), [e if e > 0 else 1e-30 for e in errors], color=colors)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)), [r.module for r in rows], rotation=90, fontsize=6)
    ax.set_ylabel("max abs error")
    ax.set_title(result.text().split("\n", 1)[0][:100], fontsize=8)
    fig.tight_layout()

    def save(tmp: Path) -> None:
        fig.savefig(tmp, format="png")
        plt.close(fig)

    return _atomic_write(Path(path), save)
