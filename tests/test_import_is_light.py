"""`import tinykit`, its CLI module and its pytest plugin must not import heavy libraries."""

from __future__ import annotations

import subprocess
import sys

HEAVY = {"torch", "transformers", "datasets", "tokenizers", "safetensors"}


def test_import_tinykit_loads_no_heavy_library():
    heavy = HEAVY | {"rich"}  # progress bars import it when they draw one, not before
    code = (
        "import sys, tinykit, tinykit.errors, tinykit.cli, tinykit.pytest_plugin, tinykit._progress; "
        f"print(sorted({heavy!r} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cli_help_loads_no_heavy_library():
    code = (
        "import sys, contextlib, io\n"
        "from tinykit.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['--help'])\n"
        "    except SystemExit: pass\n"
        f"print(sorted({HEAVY!r} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plugin_modules_load_no_heavy_library():
    code = (
        "import sys, tinykit.pytest_plugin.fixtures, tinykit.pytest_plugin.snapshot, "
        "tinykit.testing, tinykit.artifacts.cache; "
        f"print(sorted({HEAVY!r} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_pytest_session_with_the_plugin_loads_no_heavy_library(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "import sys\n"
        "def pytest_sessionfinish(session):\n"
        f"    print('heavy:', sorted({HEAVY!r} & set(sys.modules)))\n"
        "    print('tinykit plugin:', session.config.pluginmanager.hasplugin('tinykit'))\n"
    )
    (tmp_path / "test_x.py").write_text("def test_x(): pass\n")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-s", "-p", "tinykit", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "heavy: []" in out.stdout and "tinykit plugin: True" in out.stdout


def test_every_public_name_loads_and_is_listed():
    import tinykit

    assert sorted(tinykit.__all__) == sorted([*tinykit._LAZY, *tinykit._MODULES, "__version__"])
    for name in tinykit.__all__:
        assert getattr(tinykit, name) is not None
