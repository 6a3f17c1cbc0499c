"""Seeding and determinism switches: one call before anything random happens.

`seed_everything(seed)` seeds Python, NumPy, torch CPU and every available accelerator.
`deterministic=True` adds the determinism knobs; they cost speed, so production runs call it
without a seed: a seed is then picked and logged, and rerunning with that seed reproduces the run
(MLE training/reproducibility). DataLoader order needs its own generator: `dataloader_kwargs(seed)`.
`capture_rng_state()` / `restore_rng_state(state)` make resume tests honest.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import random
import secrets
import sys
from typing import Any

from tinykit._devices import seed_backends
from tinykit.errors import DeviceUnavailableError, UsageError

__all__ = [
    "capture_rng_state",
    "dataloader_kwargs",
    "enable_determinism",
    "restore_rng_state",
    "seed_everything",
    "seed_worker",
]

logger = logging.getLogger("tinykit")

# ~24 MiB of extra GPU memory, more headroom than ":16:8"; the common choice.
CUBLAS_WORKSPACE = ":4096:8"
_MAX_SEED = 2**32 - 1  # numpy's legacy seeding takes 32 bits


def seed_everything(seed: int | None = None, deterministic: bool = False) -> int:
    """Seed every RNG tinykit knows; optionally make torch deterministic. Returns the seed.

    Args:
        seed: 0 .. 2**32-1. None picks a random one and logs it (WARNING on the "tinykit"
            logger) so the run can be reproduced by passing it back.
        deterministic: also call `enable_determinism()` (slower on GPU).

    The seed is also exported as TINYKIT_SEED, so child processes and `tinykit env capture` see it.

    Raises:
        UsageError: the seed is not an integer in range.
        DeviceUnavailableError: deterministic=True but CUDA is already initialised without
            CUBLAS_WORKSPACE_CONFIG, which then cannot take effect.
    """
    if seed is None:
        seed = secrets.randbelow(_MAX_SEED) + 1
        logger.warning(
            "tinykit: no seed given, using seed=%d; reproduce with seed_everything(%d)", seed, seed
        )
    elif isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _MAX_SEED:
        raise UsageError(
            f"seed_everything(seed={seed!r}) is not an integer in 0..{_MAX_SEED}. "
            "Pass an int such as seed_everything(1234), or None to pick one."
        )
    if deterministic:
        enable_determinism()  # before seeding: it must refuse before anything changed
    os.environ["TINYKIT_SEED"] = str(seed)  # children and `tinykit env capture` see it
    for name in ("numpy", "torch"):  # seed_everything seeds them even when not imported yet
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    seed_loaded(seed)
    return seed


def seed_loaded(seed: int, only: set[str] | None = None) -> None:
    """Seed `random` and, only if already imported, NumPy and torch with every accelerator.

    Never imports them (the pytest plugin seeds each test this way), and exports nothing.
    `only` limits the seeding to those of {"random", "numpy", "torch"}.
    """
    if only is None or "random" in only:
        random.seed(seed)
    if "numpy" in sys.modules and (only is None or "numpy" in only):
        sys.modules["numpy"].random.seed(seed)
    if "torch" in sys.modules and (only is None or "torch" in only):
        torch = sys.modules["torch"]
        torch.manual_seed(seed)  # CPU, and CUDA when it is there
        for backend in seed_backends(torch):  # cuda, xpu, npu, mlu, musa, hpu
            backend.manual_seed_all(seed)


def check_cuda_order(cuda_initialized: bool) -> None:
    """Refuse when CUDA already exists and CUBLAS_WORKSPACE_CONFIG was not set before it.

    cuBLAS reads the variable when the CUDA context is created; set later it is silently
    ignored, and deterministic algorithms then fail at the first matmul (field-guide §5).
    """
    if cuda_initialized and not os.environ.get("CUBLAS_WORKSPACE_CONFIG"):
        raise DeviceUnavailableError(
            "seed_everything(deterministic=True) came too late: CUDA is already initialised and "
            "CUBLAS_WORKSPACE_CONFIG is unset, so cuBLAS cannot be made deterministic in this "
            f"process. Export CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE} before starting Python, "
            "or call seed_everything(..., deterministic=True) before anything touches CUDA.",
            required="CUBLAS_WORKSPACE_CONFIG before CUDA init",
            found="CUDA initialised",
        )


def enable_determinism() -> None:
    """Set CUBLAS_WORKSPACE_CONFIG, torch.use_deterministic_algorithms(True) and the cuDNN flags."""
    import torch

    check_cuda_order(torch.cuda.is_initialized())
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False  # per-shape algorithm timing picks differ between runs
    torch.backends.cudnn.deterministic = True


def seed_worker(worker_id: int) -> None:
    """DataLoader `worker_init_fn`: seed Python and NumPy from the worker's torch seed."""
    import torch

    worker_seed = torch.initial_seed() % 2**32
    random.seed(worker_seed)
    try:
        import numpy as np
    except ImportError:
        return
    np.random.seed(worker_seed)


def dataloader_kwargs(seed: int) -> dict[str, Any]:
    """`DataLoader(ds, shuffle=True, **dataloader_kwargs(seed))` gives the same order every run."""
    import torch

    generator = torch.Generator()
    generator.manual_seed(seed)
    return {"generator": generator, "worker_init_fn": seed_worker}


def capture_rng_state() -> dict[str, Any]:
    """Every RNG state `seed_everything` controls, for a checkpoint.

    The dict holds only tensors, tuples, lists and numbers, so `torch.load(path)` reads it back with
    the default weights_only=True.
    """
    state: dict[str, Any] = {"python": random.getstate()}
    try:
        import numpy as np

        legacy = np.random.get_state(legacy=True)
        assert isinstance(legacy, tuple)  # the global generator is MT19937: the legacy tuple
        name, keys, pos, has_gauss, gauss = legacy
        # plain ints, so torch.load(..., weights_only=True) accepts the checkpoint
        state["numpy"] = (name, keys.tolist(), int(pos), int(has_gauss), float(gauss))
    except ImportError:
        pass
    try:
        import torch
    except ImportError:
        return state
    state["torch"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back what `capture_rng_state` returned, so a resumed run draws the same numbers."""
    unknown = set(state) - {"python", "numpy", "torch", "cuda"}
    if unknown or "python" not in state:
        raise UsageError(
            f"restore_rng_state got keys {sorted(state)}; expected the dict from "
            "capture_rng_state(). Pass that dict unchanged (torch.save/torch.load "
            "it)."
        )
    random.setstate(state["python"])
    if "numpy" in state:
        import numpy as np

        name, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    if "torch" in state:
        import torch

        torch.set_rng_state(state["torch"])
        if "cuda" in state:
            torch.cuda.set_rng_state_all(state["cuda"])
