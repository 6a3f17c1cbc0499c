"""`tensor_snapshot`: compare tensors (logits, losses, grads) with golden safetensors files.

Goldens live beside the tests, one file per test, name and environment::

    tests/__snapshots__/<test module>/<test name>/<name>@<env key>.safetensors

The environment key holds what legitimately changes numbers: the torch and transformers
versions, the device type and the dtypes (``torch-2.13.0+cpu_transformers-5.24.0_cpu_float32``).
A test run in a new environment therefore fails with "no snapshot" rather than comparing
against numbers from another one; record them with ``pytest --tinykit-update-snapshots``.
This module holds only the fixture and the golden files; the comparison (dtype-aware tolerances
as in ``torch.testing.assert_close``) is `tinykit.numerics.compare`.

    def test_logits(tiny_model, tensor_snapshot):
        model, _ = tiny_model("qwen3", layers=2)
        tensor_snapshot("logits", model(torch.arange(8)[None]).logits)
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tinykit.errors import SnapshotMismatch, UsageError
from tinykit.numerics.compare import compare_dicts

if TYPE_CHECKING:
    import torch

UPDATE_FLAG = "--tinykit-update-snapshots"
WRITTEN = pytest.StashKey[list]()  # snapshot files written this session, for the summary


def env_key(tensors: Mapping[str, torch.Tensor]) -> str:
    """``torch-<v>_transformers-<v>_<device>_<dtypes>`` for the tensors being compared."""

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "absent"

    devices = "+".join(sorted({t.device.type for t in tensors.values()}))
    dtypes = "+".join(sorted({str(t.dtype).removeprefix("torch.") for t in tensors.values()}))
    return f"torch-{version('torch')}_transformers-{version('transformers')}_{devices}_{dtypes}"


class TensorSnapshot:
    """Callable held by the ``tensor_snapshot`` fixture; see the module docstring."""

    def __init__(self, folder: Path, nodeid: str, update: bool) -> None:
        self.folder = folder
        self.nodeid = nodeid
        self.update = update
        self.written: list[Path] = []

    def __call__(
        self,
        name: str,
        value: torch.Tensor | Mapping[str, torch.Tensor],
        *,
        rtol: float | None = None,
        atol: float | None = None,
    ) -> None:
        """Check ``value`` (a tensor or a ``{name: tensor}`` dict) against snapshot ``name``.

        Raises:
            SnapshotMismatch: no snapshot for this environment, or values out of tolerance.
        """
        from safetensors.torch import load_file

        tensors = self._as_dict(name, value)
        path = self.folder / f"{name}@{env_key(tensors)}.safetensors"
        if self.update:
            self._write(path, tensors)
            return
        if not path.is_file():
            others = sorted(p.name for p in self.folder.glob(f"{name}@*.safetensors"))
            raise SnapshotMismatch(
                f"No snapshot {name!r} for this environment: {path} does not exist. "
                f"Snapshots recorded for other environments: {others or 'none'}. "
                f"Record it with: pytest '{self.nodeid}' {UPDATE_FLAG}",
                path=path,
                name=name,
            )
        problems = compare_dicts(
            tensors, load_file(path), rtol=rtol, atol=atol, expected_name="the snapshot"
        )
        if problems:
            raise SnapshotMismatch(
                f"Tensor snapshot {name!r} differs from {path}: " + "; ".join(problems) + ". "
                f"If the change is intended, rewrite it with: pytest '{self.nodeid}' {UPDATE_FLAG}",
                path=path,
                name=name,
                problems=problems,
            )

    def _as_dict(self, name: str, value: object) -> dict[str, torch.Tensor]:
        import torch

        if isinstance(value, torch.Tensor):
            return {name: value}
        if (
            isinstance(value, Mapping)
            and value
            and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())
        ):
            return dict(value)
        raise UsageError(
            f"tensor_snapshot({name!r}, ...) got {type(value).__name__}. It takes a torch.Tensor "
            "or a non-empty dict of str -> torch.Tensor. Pass e.g. output.logits or "
            "{n: p.grad for n, p in model.named_parameters()}."
        )

    def _write(self, path: Path, tensors: dict[str, torch.Tensor]) -> None:
        from safetensors.torch import save_file

        path.parent.mkdir(parents=True, exist_ok=True)
        cpu = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
        try:
            save_file(cpu, tmp, metadata={"tinykit_nodeid": self.nodeid})
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.written.append(path)


def snapshot_folder(test_path: Path, test_name: str) -> Path:
    safe = re.sub(r"[^\w.\-]+", "_", test_name).strip("_")
    return test_path.parent / "__snapshots__" / test_path.stem / safe


@pytest.fixture
def tensor_snapshot(request: pytest.FixtureRequest) -> Iterator[TensorSnapshot]:
    """``tensor_snapshot(name, tensor_or_dict, rtol=None, atol=None)``: compare with a golden."""
    update = bool(request.config.getoption("tinykit_update_snapshots"))
    snap = TensorSnapshot(
        snapshot_folder(Path(request.node.path), request.node.name), request.node.nodeid, update
    )
    yield snap
    request.config.stash.setdefault(WRITTEN, []).extend(snap.written)
