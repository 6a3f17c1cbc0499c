"""`tensor_snapshot`: compare tensors (logits, losses, grads) with golden safetensors files.

Goldens live beside the tests, one file per test, name and environment::

    tests/__snapshots__/<test module>/<test name>/<name>@<env key>.safetensors

The environment key holds what legitimately changes numbers: the torch and transformers
versions, the device type and the dtypes (``torch-2.13.0+cpu_transformers-5.24.0_cpu_float32``).
In an environment with no recording of its own, the test compares against the nearest recorded
one (same device and dtypes, fewest package versions changed) under the looser
``ACROSS_ENVIRONMENTS`` tolerances, so an upgrade that changes the numbers fails and says which
recording it differs from. The new environment is recorded only with
``pytest --tinykit-update-snapshots``.
This module holds the fixture and the golden files; the comparison (dtype-aware tolerances
as in ``torch.testing.assert_close``) is `tinykit.numerics.compare`.

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
from tinykit.numerics.compare import compare_dicts

if TYPE_CHECKING:
    import torch

# (rtol, atol) against another environment's recording: kernels and reduction orders change
# between versions, so bit-level drift is expected; a real regression is far larger than this.
ACROSS_ENVIRONMENTS = {
    "float16": (1e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
    "float32": (1e-4, 1e-5),
    "float64": (1e-6, 1e-7),
}
UPDATE_FLAG = "--tinykit-update-snapshots"
WRITTEN = pytest.StashKey[list]()  # snapshot files written this session, for the summary
ACROSS = pytest.StashKey[list]()  # snapshots that matched another environment's recording
ENV_KEY = re.compile(
    r"torch-(?P<torch>.+?)_transformers-(?P<transformers>.+?)_(?P<rest>[^_]+_[^_]+)$"
)


def env_key(tensors: Mapping[str, torch.Tensor]) -> str:
    """``torch-<v>_transformers-<v>_<device>_<dtypes>`` for the tensors being compared."""
    versions = "_".join(f"{k}-{v}" for k, v in package_versions(SNAPSHOT).items())
    devices = "+".join(sorted({t.device.type for t in tensors.values()}))
    dtypes = "+".join(sorted({str(t.dtype).removeprefix("torch.") for t in tensors.values()}))
    return f"{versions}_{devices}_{dtypes}"


class TensorSnapshot:
    """Callable held by the ``tensor_snapshot`` fixture; see the module docstring."""

    def __init__(self, folder: Path, nodeid: str, update: bool) -> None:
        self.folder = folder
        self.nodeid = nodeid
        self.update = update
        self.written: list[Path] = []
        self.across: list[Path] = []

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
        tolerance = (rtol, atol)
        recorded, changed = path, ""
        if not path.is_file():
            nearest, changed = self._nearest(name, path)
            if nearest is None:
                raise SnapshotMismatch(
                    f"No snapshot {name!r} for this environment: {path} does not exist, nor one "
                    "for the same device and dtypes under other versions. "
                    f"Record it with: pytest '{self.nodeid}' {UPDATE_FLAG}",
                    path=path,
                    name=name,
                )
            recorded = nearest
            dtype = str(next(iter(tensors.values())).dtype).removeprefix("torch.")
            cross = ACROSS_ENVIRONMENTS.get(dtype, (0.0, 0.0))
            tolerance = (cross[0] if rtol is None else rtol, cross[1] if atol is None else atol)
        problems = compare_dicts(
            tensors,
            load_file(recorded),
            rtol=tolerance[0],
            atol=tolerance[1],
            expected_name="the snapshot",
        )
        if problems:
            what = f"the {changed} recording {recorded}" if changed else str(recorded)
            raise SnapshotMismatch(
                f"Tensor snapshot {name!r} differs from {what}: " + "; ".join(problems) + ". "
                f"If the change is intended, rewrite it with: pytest '{self.nodeid}' {UPDATE_FLAG}",
                path=recorded,
                name=name,
                problems=problems,
            )
        if changed:
            self.across.append(recorded)

    def _nearest(self, name: str, path: Path) -> tuple[Path | None, str]:
        """The recording of ``name`` closest to this environment (same device and dtypes, fewest
        versions changed, then the newest), and what changed, e.g. ``transformers 5.23.0``."""
        here = ENV_KEY.match(path.name.removesuffix(".safetensors").partition("@")[2])
        if not here:
            return None, ""
        candidates = []
        for other in self.folder.glob(f"{name}@*.safetensors"):
            there = ENV_KEY.match(other.name.removesuffix(".safetensors").partition("@")[2])
            if not there or there["rest"] != here["rest"]:
                continue
            changed = [f"{k} {there[k]}" for k in ("torch", "transformers") if there[k] != here[k]]
            candidates.append((len(changed), _version_distance(here, there), other, changed))
        if not candidates:
            return None, ""
        _, _, best, changed = min(candidates, key=lambda c: c[:3])
        return best, " and ".join(changed)

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


def _version_distance(here: re.Match[str], there: re.Match[str]) -> tuple[int, ...]:
    """How far apart two environments' versions are, numerically, package by package."""

    def parts(version: str) -> list[int]:
        return ([int(n) for n in re.findall(r"\d+", version)] + [0, 0, 0])[:3]

    pairs = [(parts(here[k]), parts(there[k])) for k in ("torch", "transformers")]
    return tuple(abs(a - b) for x, y in pairs for a, b in zip(x, y, strict=True))


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
    request.config.stash.setdefault(ACROSS, []).extend(snap.across)
