"""The public API and the README's file map stay true: every exported name and documented path loads."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import tinykit

REPO = Path(__file__).resolve().parents[1]
FILE_MAP = (REPO / "README.md").read_text().split("## Files", 1)[1]
MAPPED = re.findall(r"^(tinykit/\S+)", FILE_MAP, re.M)


@pytest.mark.parametrize("name", tinykit.__all__)
def test_every_public_name_loads(name):
    assert getattr(tinykit, name) is not None


def test_type_checkers_see_the_same_face():
    # `__all__` is derived from _LAZY and _MODULES; the TYPE_CHECKING imports are a hand list
    tree = ast.parse((REPO / "tinykit" / "__init__.py").read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
    )
    static = {
        a.asname or a.name
        for n in ast.walk(block)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }
    assert static == {*tinykit._LAZY, *tinykit._MODULES}
    assert list(tinykit._LAZY) == sorted(tinykit._LAZY)


@pytest.mark.parametrize("path", [p for p in MAPPED if "<" not in p])
def test_every_documented_path_exists_and_imports(path):
    target = REPO / path
    assert target.exists(), f"README's file map names {path}, which does not exist"
    if path.endswith(".py") and not path.endswith("__main__.py"):
        importlib.import_module(
            path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        )


def test_every_module_is_in_the_file_map():
    folders = tuple(p for p in MAPPED if p.endswith("/"))
    unlisted = [
        str(p.relative_to(REPO))
        for p in sorted((REPO / "tinykit").rglob("*.py"))
        if str(p.relative_to(REPO)) not in MAPPED
        and not str(p.relative_to(REPO)).startswith(folders + ("tinykit/cli/",))
        and p.name != "__init__.py"
    ]
    assert not unlisted, f"add these to README.md's file map: {unlisted}"


def test_moved_modules_keep_their_public_attribute_paths():
    assert tinykit.seed.seed_everything is tinykit.seed_everything
    assert callable(tinykit.env.capture) and callable(tinykit.env.diff)
    assert tinykit.errors.TinykitError
    from tinykit.distributed import free_port

    assert free_port() > 0


def test_no_file_name_prefix_family():
    # CONTRIBUTING.md: files sharing a `<word>_` prefix (two of them, or one beside `<word>.py`)
    # become a folder `<word>/`; one file per command in cli/ is the exception
    families = []
    for folder in sorted(
        {p.parent for p in (REPO / "tinykit").rglob("*.py")} - {REPO / "tinykit/cli"}
    ):
        stems = {p.stem.lstrip("_") for p in folder.glob("*.py")}
        words = [s.split("_")[0] for s in stems if "_" in s]
        families += [
            f"{folder.relative_to(REPO)}/{w}_*.py"
            for w in sorted(set(words))
            if words.count(w) > 1 or w in stems
        ]
    assert not families, f"make these prefix families folders: {families}"
