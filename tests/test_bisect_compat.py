"""`tinykit fixtures compat`: named fixtures built, loaded and their logits hashed per version."""

from __future__ import annotations

import json

import transformers

from tinykit.cli import main


def test_compat_table_under_the_installed_transformers(capsys):
    # The installed version runs in the base environment: nothing is downloaded.
    version = transformers.__version__
    assert main(["fixtures", "compat", "tiny-llama", "--versions", version, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    cell = result["cells"]["tiny-llama"][version]
    assert (cell["build"], cell["load"], len(cell["logits"])) == ("ok", "ok", 64)
    assert result["same_logits"] == {"tiny-llama": True}


def test_an_unknown_fixture_version_is_a_failed_install_cell(tmp_path, capsys):
    argv = [
        "fixtures",
        "compat",
        "tiny-llama",
        "--versions",
        "0.0.1",
        "--find-links",
        str(tmp_path),
    ]
    assert main(argv) == 1
    assert "| tiny-llama | build failed: install failed" in capsys.readouterr().out
