"""`tensor_snapshot`: compare tensors (logits, losses, grads) with golden safetensors files.

Goldens live beside the tests, one file per test, name and environment::

    tests/__snapshots__/<test module>/<test name>/<name>@<env key>.safetensors

The environment key holds what legitimately changes numbers: the torch and transformers
versions, the device type and the dtypes (``torch-2.13.0+cpu_transformers-5.24.0_cpu_float32``).
A test run in a new environment therefore fails with "no snapshot" rather than comparing
against numbers from another one; record them with ``pytest --tinykit-update-snapshots``.

    def test_logits(tiny_model, tensor_snapshot):
        model, _ = tiny_model("qwen3", layers=2)
        tensor_snapshot("logits", model(torch.arange(8)[None]).logits)
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tinykit._files import atomic_write
from tinykit._versions import SNAPSHOT, package_versions
from tinykit.errors import SnapshotMismatch, UsageError

if TYPE_CHECKING:
    import torch

# (rtol, atol) per dtype: torch.testing.assert_close's defaults; integers and bools are exact.
TOLERANCES = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}
UPDATE_FLAG = "--tinykit-update-snapshots"
WRITTEN = pytest.StashKey[list]()  # snapshot files written this session, for the summary


def env_key(tensors: Mapping[str, torch.Tensor]) -> str:
    """``torch-<v>_transformers-<v>_<device>_<dtypes>`` for the tensors being compared."""
    versions = "_".join(f"{k}-{v}" for k, v in package_versions(SNAPSHOT).items())
    devices = "+".join(sorted({t.device.type for t in tensors.values()}))
    dtypes = "+".join(sorted({str(t.dtype).removeprefix("torch.") for t in tensors.values()}))
    return f"{versions}_{devices}_{dtypes}"


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES.get(str(dtype).removeprefix("torch."), (0.0, 0.0))


def compare(
    actual: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    rtol: float | None = None,
    atol: float | None = None,
) -> list[str]:
    """Describe every difference between two tensor dicts; an empty list means they match.

    An element differs when ``torch.isclose(a, e, rtol, atol, equal_nan=True)`` says so, in the
    tensors' own dtype as ``torch.testing.assert_close`` does (``|a - e| <= atol + rtol * |e|``,
    NaNs at the same places); ``rtol``/``atol`` default to the dtype's ``TOLERANCES``.
    """
    problems = []
    if missing := sorted(expected.keys() - actual.keys()):
        problems.append(f"missing tensors {missing} (present in the snapshot)")
    if extra := sorted(actual.keys() - expected.keys()):
        problems.append(f"unexpected tensors {extra} (absent from the snapshot)")
    for name in sorted(actual.keys() & expected.keys()):
        if problem := _compare_one(name, actual[name], expected[name], rtol, atol):
            problems.append(problem)
    return problems


def _compare_one(
    name: str,
    a: torch.Tensor,
    e: torch.Tensor,
    rtol: float | None,
    atol: float | None,
) -> str | None:
    import torch

    if a.shape != e.shape or a.dtype != e.dtype:
        return (
            f"{name!r}: shape/dtype {tuple(a.shape)} {a.dtype} but the snapshot has "
            f"{tuple(e.shape)} {e.dtype}"
        )
    default_rtol, default_atol = tolerances(a.dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    wide = torch.complex128 if a.is_complex() else torch.float64
    a64, e64 = a.detach().cpu().to(wide), e.detach().cpu().to(wide)
    abs_err = (a64 - e64).abs()
    both_nan = a64.isnan() & e64.isnan()
    same_inf = a64.isinf() & (a64 == e64)
    a_cpu, e_cpu = a.detach().cpu(), e.detach().cpu()
    if a.dtype.is_floating_point or a.is_complex():
        bad = ~torch.isclose(a_cpu, e_cpu, rtol=rtol, atol=atol, equal_nan=True)
    else:
        bad = abs_err > atol + rtol * e64.abs()
    if not bool(bad.any()):
        return None
    finite_err = torch.where(both_nan | same_inf, torch.zeros_like(abs_err), abs_err)
    finite_err = torch.nan_to_num(finite_err, nan=float("inf"))
    rel_err = finite_err / e64.abs()
    rel_err = torch.where(finite_err == 0, torch.zeros_like(rel_err), rel_err)
    first = divmod_all(int(bad.flatten().nonzero()[0]), a.shape)
    max_abs_at = divmod_all(int(finite_err.argmax()), a.shape)
    max_rel_at = divmod_all(int(rel_err.argmax()), a.shape)
    return (
        f"{name!r}: {int(bad.sum())} of {a.numel()} elements differ (rtol={rtol:g}, atol={atol:g} "
        f"for {str(a.dtype).removeprefix('torch.')}). First at index {first}: actual "
        f"{a64[first].item():.9g} vs expected {e64[first].item():.9g}. Max abs error "
        f"{finite_err.max().item():.3g} at {max_abs_at}, max rel error {rel_err.max().item():.3g} "
        f"at {max_rel_at}"
    )


def divmod_all(flat: int, shape: torch.Size) -> tuple[int, ...]:
    """The multi-dimensional index of element ``flat`` in a tensor of ``shape``."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return tuple(index[::-1])


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
        problems = compare(tensors, load_file(path), rtol=rtol, atol=atol)
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
        from safetensors.torch import save

        path.parent.mkdir(parents=True, exist_ok=True)
        cpu = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
        atomic_write(path, save(cpu, metadata={"tinykit_nodeid": self.nodeid}))
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
