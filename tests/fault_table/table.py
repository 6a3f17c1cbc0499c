"""One row of the fault table, and the runner every row goes through (in this process: the CLI's
`main` is the adapter under test)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fault_table.broken import CORRUPT
from tinykit.cli import main

EXIT_BUG = 70  # no row may end here: that is "a tinykit bug"


@dataclass(frozen=True)
class Row:
    argv: tuple[str, ...]  # {in}: the inputs folder, {out}: a fresh folder; see PLACES
    code: int
    says: str  # a piece of the one stderr line (stdout, for a row that succeeds)
    needs: tuple[str, ...] = field(default=())  # "full" / "ro": a tmpfs mount
    corrupt: str = ""  # a CORRUPT entry (conftest) applied to {cache}, a copy of a built cache
    traceback: bool = False  # --debug: a traceback comes before the one line


def row(argv: str, code: int, says: str, *needs: str, corrupt: str = "", tb: bool = False) -> Row:
    return Row(tuple(argv.split()), code, says, needs, corrupt, tb)


FX = "--fixtures-dir {fx} --cache-dir {cache}"  # a fixtures folder, its lock and built cache

# placeholder -> the module fixture whose folder it names (built only for rows that use it)
PLACES = {"in": "inputs", "model": "model", "dump": "dumps", "repo": "git_repo"}
UNWATCHED = {"model", "repo"}  # shared by many rows; read only


def run_row(r: Row, request, tmp_path: Path, monkeypatch, capsys) -> None:
    """Run one row and check it: its exit code, one stderr line saying `r.says`, no traceback,
    and every folder it was given byte for byte as before."""
    text = " ".join(r.argv)
    places = {"out": str(tmp_path / "out")}
    for key, fixture in PLACES.items():
        if "{" + key + "}" in text:
            places[key] = str(request.getfixturevalue(fixture))
    if "{cache}" in text:  # a private copy of a built, locked fixture cache
        shutil.copytree(request.getfixturevalue("built_fixtures"), tmp_path / "fixtures")
        places |= {
            "fx": str(tmp_path / "fixtures" / "fx"),
            "cache": str(tmp_path / "fixtures" / "cache"),
        }
        if r.corrupt:
            CORRUPT[r.corrupt](tmp_path / "fixtures" / "cache")
    if r.needs:
        mounts = request.getfixturevalue("mounts")
        for need in r.needs:
            if not isinstance(mounts[need], Path):
                pytest.skip(f"cannot mount a tmpfs for this case: {mounts[need]}")
            places[need] = str(mounts[need])
    argv = [a.format(**places) for a in r.argv]
    watched = [Path(p) for k, p in places.items() if k not in UNWATCHED]
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path / "out")  # default output names land here, where we look
    before = {str(p): tree(p) for p in watched if p.is_dir()}
    capsys.readouterr()  # drop what building a fixture printed: judge the command alone
    try:
        code = main(argv)
    except SystemExit as e:  # argparse, --version
        code = e.code
    out, err = capsys.readouterr()
    assert code == r.code, err
    if code == 0:
        assert r.says in out and "Traceback" not in err, (out, err)
    else:
        # stage lines ("tinykit: resolving ...") may come first; the error is one line, the last
        lines = [line for line in err.splitlines() if line.strip()]
        assert err.endswith("\n") and lines, err
        if r.traceback:  # --debug: the traceback, then the same one line
            assert "Traceback" in err and lines[-1].startswith("tinykit: error: "), err
        else:
            assert all(is_stage(line) for line in lines[:-1]) and not is_stage(lines[-1]), err
            assert "Traceback" not in err, err
        assert r.says in lines[-1], err
    assert {str(p): tree(p) for p in watched if p.is_dir()} == before  # nothing written or left


def is_stage(line: str) -> bool:
    return line.startswith("tinykit: ") and not line.startswith("tinykit: error:")


def tree(folder: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None
        for p in sorted(folder.rglob("*"))
    }
