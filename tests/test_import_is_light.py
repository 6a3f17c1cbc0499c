"""`import tinykit`, its CLI module and its pytest plugin must not import heavy libraries."""

from __future__ import annotations

import subprocess
import sys

HEAVY = {"torch", "transformers", "datasets", "tokenizers", "safetensors"}


def test_import_tinykit_loads_no_heavy_library():
    code = (
        "import sys, tinykit, tinykit.errors, tinykit.cli, tinykit.pytest_plugin; "
        f"print(sorted({HEAVY!r} & set(sys.modules)))"
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
