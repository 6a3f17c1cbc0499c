"""tinykit._devices: one accelerator list; nothing in it may initialise CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from tinykit import _devices, testing


def test_testing_re_exports_the_one_implementation():
    for name in ("accelerators", "gpu_count", "select_device", "bf16_supported", "device_memory"):
        assert getattr(testing, name) is getattr(_devices, name)


def test_this_machine_as_torch_sees_it():
    expected = [n for n in _devices.ACCELERATORS if n == "cuda" and torch.cuda.is_available()]
    if not torch.cuda.is_available():
        assert "cuda" not in _devices.accelerators()
        assert _devices.gpu_count("cuda") == 0
    assert _devices.gpu_count("cuda") == torch.cuda.device_count()
    assert set(expected) <= set(_devices.accelerators())
    assert _devices.bf16_supported("cpu") is True
    assert _devices.device_memory("cpu") is None


def test_select_device_honours_tinykit_device(monkeypatch):
    monkeypatch.setenv("TINYKIT_DEVICE", "cuda:3")
    assert _devices.select_device() == "cuda:3"
    monkeypatch.delenv("TINYKIT_DEVICE")
    found = _devices.accelerators()
    assert _devices.select_device() == (found[0] if found else "cpu")


def test_the_helpers_never_create_a_cuda_context():
    code = textwrap.dedent(
        """
        import json, torch
        from tinykit import _devices
        seen = [_devices.accelerators(), _devices.gpu_count(), _devices.select_device(),
                _devices.device_memory(), _devices.physical_gpus(),
                [b.__name__ for b in _devices.seed_backends(torch)]]
        print(json.dumps({"initialized": torch.cuda.is_initialized(), "seen": repr(seen)}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1])["initialized"] is False


FAKE_SMI = """#!/bin/sh
echo "NVIDIA H100 80GB HBM3, 9.0, 81559, 550.54.15"
echo "Tesla T4, 7.5, 15360, 550.54.15"
"""


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    if _devices.importlib.util.find_spec("pynvml") is not None:
        pytest.skip("nvidia-ml-py is installed, so NVML is asked instead of nvidia-smi")
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.skipif(torch.cuda.is_initialized(), reason="reads torch's properties instead")
def test_physical_gpus_from_nvidia_smi_and_visible_devices(fake_nvidia_smi, monkeypatch):
    gpus = _devices.physical_gpus()
    assert [g["name"] for g in gpus] == ["NVIDIA H100 80GB HBM3", "Tesla T4"]
    assert gpus[1] == {
        "name": "Tesla T4",
        "capability": "7.5",
        "memory_mib": 15360,
        "driver": "550.54.15",
    }
    # CUDA index 0 is the second physical GPU when only that one is visible
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert _devices._visible_gpu(0)["name"] == "Tesla T4"
    assert _devices._visible_gpu(1) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5f3e")  # UUIDs cannot be mapped
    assert _devices._visible_gpu(0) is None


def test_no_nvidia_smi_means_no_gpus(tmp_path, monkeypatch):
    if _devices.importlib.util.find_spec("pynvml") is not None or torch.cuda.is_initialized():
        pytest.skip("devices come from NVML or torch here")
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi
    assert _devices.physical_gpus() == []


def test_make_tiny_runs_on_one_thread_and_gives_the_callers_count_back(tmp_path):
    """Tiny tensors on one intra-op thread (threads waiting on each other stall on a busy box);
    the caller's count returns after the build, and after a build that fails."""
    from tinykit import make_tiny
    from tinykit.errors import UsageError
    from tinykit.model import verify

    seen = []
    real = verify.verify_built

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        verify.verify_built = spy
        make_tiny("llama", tmp_path / "ok")
        assert seen == [1] and torch.get_num_threads() == 3
        with pytest.raises(UsageError, match="BertModel"):  # refused inside the build
            make_tiny("llama", tmp_path / "bad", model_class="BertModel")
        assert torch.get_num_threads() == 3
    finally:
        verify.verify_built = real
        torch.set_num_threads(before)
