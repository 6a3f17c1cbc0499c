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


def test_a_logits_mismatch_is_linked_to_the_first_diverging_module(tmp_path):
    """The per-version probe records the forward it hashes; where two versions' logits differ the
    table gets the first divergence of those recordings. Here "version 2" is the same fixture with
    one layer's weights moved, as a release that changed an init or a conversion would."""
    import torch

    import tinykit
    from tinykit.bisect.compat import CompatResult, _diverging, _logits_digest
    from tinykit.model.load import load_model

    path = tinykit.fixture_path("tiny-llama")
    result = CompatResult("transformers", ["1", "2"])
    cells = {}
    for version in result.versions:
        model = load_model(path)
        if version == "2":
            with torch.no_grad():
                model.model.layers[1].self_attn.o_proj.weight.mul_(1.5)
        (tmp_path / version).mkdir()
        cells[version] = {"build": "ok", "load": "ok"}
        cells[version]["logits"] = _logits_digest(model, tmp_path / version / "tiny-llama")
    result.cells["tiny-llama"] = cells
    assert result.same_logits("tiny-llama") is False
    _diverging(result, tmp_path)
    text = result.divergence["tiny-llama"]["2"]
    assert text.startswith(
        "against 1, first divergence: parameter 'model.layers.1.self_attn.o_proj.weight' differs"
    )
    assert "tiny-llama transformers 2: against 1, first divergence" in result.markdown()
