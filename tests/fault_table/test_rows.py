"""Every row of the fault table, run through the CLI in this process (see `table.run_row`)."""

from __future__ import annotations

import pytest

from fault_table import rows_data, rows_make, rows_run
from fault_table.table import Row, run_row

TABLES = (rows_make.ROWS, rows_data.ROWS, rows_run.ROWS)
ROWS: dict[tuple[str, str], Row] = {
    (command, name): r
    for table in TABLES
    for command, rows in table.items()
    for name, r in rows.items()
}


@pytest.mark.parametrize("key", list(ROWS), ids=[f"{c}: {n}" for c, n in ROWS])
def test_fault(key, request, tmp_path, monkeypatch, capsys):
    run_row(ROWS[key], request, tmp_path, monkeypatch, capsys)


def test_a_built_model_follows_the_umask(model):
    """make-tiny's model.safetensors was 0600 beside 0644 siblings (safetensors writes privately)."""
    from tinykit._files import umask

    modes = {p.name: p.stat().st_mode & 0o777 for p in (model / "good").iterdir()}
    assert set(modes.values()) == {0o666 & ~umask()}, modes
