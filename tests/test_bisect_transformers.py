"""A real behaviour change between transformers releases, bisected over 22 releases from PyPI.

`AutoConfig` learns the model type "qwen3_5" in one 5.x release: `CONFIG_MAPPING` lacks it in
5.0.0 and has it in 5.12.0. The bisect (terms absent/present) must name that exact release; the
second run, over cached environments, must be much faster. Each overlay is a
`pip install --no-deps --target` of one transformers wheel (plus the few requirements the base
environment does not meet for it), so at most ~8 downloads.
"""

from __future__ import annotations

import pytest

from tinykit.bisect.versions import bisect_versions

FIRST_PRESENT = "5.2.0"
CMD = [
    'python -c "import sys; from transformers import CONFIG_MAPPING; '
    "sys.exit(int('qwen3_5' in CONFIG_MAPPING))\""
]


@pytest.mark.tinykit_slow
def test_first_release_knowing_qwen3_5_cold_then_cached():
    runs = [
        bisect_versions(
            "transformers", "5.0.0", "5.12.0", CMD, terms=("absent", "present"), capture_env=i == 0
        )
        for i in range(2)
    ]
    cold, warm = runs
    print(f"\ncold bisect {cold.seconds:.1f}s, cached {warm.seconds:.1f}s\n{cold.render()}")
    assert len(cold.releases) >= 10
    assert (cold.first_bad, warm.first_bad) == (FIRST_PRESENT, FIRST_PRESENT)
    assert cold.last_good == cold.releases[cold.releases.index(FIRST_PRESENT) - 1]
    assert any(d["key"] == "transformers" for d in cold.env_diff)
    # The step's own command (importing transformers) is the same both times; the set-up is not.
    cold_setup, warm_setup = (sum(s.setup_seconds for s in r.steps) for r in runs)
    print(f"environment set-up: cold {cold_setup:.1f}s, cached {warm_setup:.1f}s")
    assert all(s.note == "cached environment" for s in warm.steps)
    assert warm_setup < cold_setup / 20 and warm.seconds < cold.seconds / 2


@pytest.mark.tinykit_slow
def test_fixture_compat_between_two_releases():
    from tinykit.bisect.compat import fixtures_compat

    result = fixtures_compat(["5.23.0", "5.24.0"], ["tiny-llama"])
    print("\n" + result.markdown())
    assert all(c["load"] == "ok" for c in result.cells["tiny-llama"].values())
    assert result.same_logits("tiny-llama") is not None


REPRO = """import sys, torch, transformers
torch.set_num_threads(1)
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
for step in range(2):
    ids = (torch.arange(16).reshape(2, 8) * (step + 1)) % 50 + 3
    model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss.backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.tinykit_slow
def test_dumps_versions_on_two_real_releases(tmp_path, capsys):
    """`tinykit dumps versions transformers 5.22.2 5.24.0 -- python script.py`: both releases
    record the script (two training steps of the tiny-llama fixture) and the diff reports."""
    import json
    import sys

    import tinykit
    from tinykit.cli import main

    script = tmp_path / "repro.py"
    script.write_text(REPRO)
    fixture = str(tinykit.fixture_path("tiny-llama"))
    argv = ["dumps", "versions", "transformers", "5.22.2", "5.24.0", "-o", str(tmp_path / "d")]
    code = main([*argv, "--json", "--", sys.executable, str(script), fixture])
    result = json.loads(capsys.readouterr().out)
    print(f"\n{result['first']}")
    assert result["exit_codes"] == [0, 0] and code == (0 if result["equal"] else 1)
    assert result["first"].startswith(("no divergence", "first divergence"))
    for version in ("5.22.2", "5.24.0"):
        manifest = json.loads(
            (tmp_path / "d" / f"transformers-{version}" / "manifest.json").read_text()
        )
        assert manifest["versions"]["transformers"] == version
        assert manifest["model"]["class"] == "LlamaForCausalLM"
