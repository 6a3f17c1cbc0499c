"""`project_memory`: the peak memory of a full-depth model, from builds with 1 and 2 layers.

The book's way to size a model that does not fit: build it at its real width with few layers
(random weights, nothing downloaded), measure the peak of a forward pass (or of training steps),
and extrapolate the per-layer cost to the full depth. Layers are planned with make-tiny's layer
planner (tinykit.model.layers), so a model whose layers differ (MoE and dense, sliding and full
attention, linear attention) is measured with every block type, and each type gets its own
per-layer cost:

    base       = `lo` layers of every block type
    variant(b) = `hi` layers of type b, `lo` of every other type
    cost(b)    = (peak(variant b) - peak(base)) / (hi - lo)
    full       = peak(base) + sum over b of cost(b) * (count(b) in the full model - lo)

Every depth is measured in a fresh interpreter (RSS never shrinks back to what a smaller model
needs). On CPU the figure is the process's host peak; on a GPU, the device's allocated peak.
Only the deepest layer stack is projected; other stacks (a vision tower, a decoder) are built
at full depth and counted in the fixed cost.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

from tinykit.errors import (
    ChildProcessFailed,
    SetupError,
    ShrinkConstraintError,
    UnsupportedModelError,
    UsageError,
)
from tinykit.memory.sizes import format_bytes

__all__ = ["Projection", "ProjectionPlan", "plan_projection", "project_memory"]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# optimizer state per parameter, in parameter-sized tensors (torch's AdamW keeps exp_avg and
# exp_avg_sq in the parameter's dtype; plain SGD keeps nothing)
OPTIMIZER_STATES = {"adamw": 2, "adam": 2, "sgd": 0}


@dataclass(frozen=True)
class ProjectionPlan:
    """Which configs to measure: the stack, its block types and their full-depth counts."""

    stack: str  # e.g. "num_hidden_layers" or "text_config.num_hidden_layers"
    depth: int
    types: dict[str, int]  # block type label -> layers of that type in the full model
    configs: dict[str, dict[str, Any]]  # "base" and "+<type>" -> config.json dict
    counts: dict[str, dict[str, int]]  # same keys -> layers of each type in that config
    lo: int
    hi: int


def _labels(by_type: dict[tuple[Any, ...], list[int]]) -> dict[tuple[Any, ...], str]:
    """Readable names: the per-layer list values ("full_attention") where they tell the types
    apart, else "like layer N" (N: the type's first layer)."""
    if len(by_type) == 1:
        return {sig: "layer" for sig in by_type}
    words = {sig: "/".join(str(x) for x in sig if isinstance(x, str)) for sig in by_type}
    unique = len(set(words.values())) == len(words) and all(words.values())
    return {sig: words[sig] if unique else f"like layer {idx[0]}" for sig, idx in by_type.items()}


def plan_projection(raw: dict[str, Any], layers: tuple[int, int] = (1, 2)) -> ProjectionPlan:
    """The configs `project_memory` measures for config.json dict `raw` (no model is built)."""
    from tinykit.model.config import load_config
    from tinykit.model.layers import plan_layers
    from tinykit.model.recipes import recipe_for
    from tinykit.slice.plan import plan_stacks

    lo, hi = layers
    if not 1 <= lo < hi:
        raise UsageError(
            f"--layers {lo},{hi}: give two depths, the smaller first and at least 1 (e.g. 1,2)."
        )
    _, stacks = plan_stacks(raw, "auto")
    if not stacks:
        raise UnsupportedModelError(
            f"{raw.get('model_type')!r} has no layer stack tinykit knows (no layer-count key in "
            "recipes/). Add its depth key to a recipe, or measure it whole with `tinykit mem run`."
        )
    main = max(stacks, key=lambda s: s.depth)
    full = load_config(raw).to_dict()
    node = full
    for part in filter(None, main.path.rstrip(".").split(".")):
        node = node[part]
    recipe = recipe_for(node.get("model_type") or "")
    where = f"'{main.path.rstrip('.') or raw.get('model_type')}'"
    auto = plan_layers(node, main.depth_key, recipe.layer_fields, "auto", where)
    by_type: dict[tuple[Any, ...], list[int]] = {}
    for i, sig in enumerate(auto.signatures):
        by_type.setdefault(sig, []).append(i)
    labels = _labels(by_type)
    types = {labels[sig]: len(idx) for sig, idx in by_type.items()}

    def config_for_layers(kept: tuple[int, ...]) -> tuple[dict[str, Any], dict[str, int]]:
        planned = plan_layers(node, main.depth_key, recipe.layer_fields, kept, where)
        out = copy.deepcopy(raw)
        target = out
        for part in filter(None, main.path.rstrip(".").split(".")):
            target = target.setdefault(part, {"model_type": node.get("model_type")})
        target.update(planned.fields)
        return out, {labels[sig]: sum(i in kept for i in idx) for sig, idx in by_type.items()}

    seen: list[dict[str, int]] = []

    def config_with(take: dict[tuple[Any, ...], int]) -> tuple[dict[str, Any], dict[str, int]]:
        made: tuple[dict[str, Any], dict[str, int]] | None
        try:
            kept = tuple(sorted(i for sig, idx in by_type.items() for i in idx[: take[sig]]))
            made = config_for_layers(kept)
        except ShrinkConstraintError:
            # A period field (Gemma 3's sliding-window pattern) cannot express every subset of
            # layers, but every prefix: take the shortest new prefix holding the wanted layers
            # (the fit solves for any counts, as long as they differ).
            made = None
            for length in range(1, auto.source_depth + 1):
                counts = {labels[sig]: sum(i < length for i in idx) for sig, idx in by_type.items()}
                if counts not in seen and all(
                    counts[labels[sig]] >= min(n, len(by_type[sig])) for sig, n in take.items()
                ):
                    made = config_for_layers(tuple(range(length)))
                    break
            if made is None:
                raise
        assert made is not None
        seen.append(made[1])
        return made

    base_take = {sig: lo for sig in by_type}
    configs, counts = {}, {}
    configs["base"], counts["base"] = config_with(base_take)
    for sig, idx in by_type.items():
        if len(idx) > lo:  # a type with no more layers than the base has is measured whole
            key = f"+{labels[sig]}"
            configs[key], counts[key] = config_with({**base_take, sig: hi})
    return ProjectionPlan(
        f"{main.path}{main.depth_key}", main.depth, types, configs, counts, lo, hi
    )


@dataclass
class Projection:
    """Measured peaks, the fitted costs and the projected full-depth peak, in bytes."""

    source: str
    where: str  # "host" or a device such as "cuda:0"
    train: bool
    optimizer: str | None
    dtype: str
    seq: int
    batch: int
    stack: str
    depth: int
    types: dict[str, int]
    measured: dict[str, dict[str, Any]]  # config key -> {"layers", "peak", "params"}
    fixed: int
    per_layer: dict[str, int]
    projected: int
    params: int
    analytic: dict[str, int] = field(default_factory=dict)
    full: dict[str, Any] | None = None  # the measured full depth, with --full

    @property
    def error(self) -> float | None:
        """(projected - measured) / measured at full depth, when it was measured."""
        return (
            None if self.full is None else (self.projected - self.full["peak"]) / self.full["peak"]
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error}

    def summary(self) -> str:
        what = f"training step ({self.optimizer})" if self.train else "forward (inference)"
        lines = [
            f"{self.source}: {what}, batch {self.batch} x seq {self.seq}, {self.dtype}, "
            f"{self.where} peak; stack {self.stack} = {self.depth} layers "
            f"({', '.join(f'{n} x {t}' for t, n in self.types.items())})"
        ]
        for key, m in self.measured.items():
            layers = sum(m["layers"].values())
            lines.append(f"  measured {key:<12} {layers:>3} layer(s): {format_bytes(m['peak'])}")
        costs = ", ".join(f"{t}: {format_bytes(c)}" for t, c in self.per_layer.items())
        lines.append(f"  fixed {format_bytes(self.fixed)}; per layer {costs or 'n/a'}")
        lines.append(f"  projected full depth: {format_bytes(self.projected)}")
        if self.full is not None:
            lines.append(
                f"  measured full depth:  {format_bytes(self.full['peak'])} "
                f"(projection error {self.error:+.1%})"
            )
        lines.append(
            f"  analytic, {self.params:,} parameters: "
            + ", ".join(f"{k} {format_bytes(v)}" for k, v in self.analytic.items())
        )
        return "\n".join(lines)


def project_memory(
    source: str,
    *,
    layers: tuple[int, int] = (1, 2),
    seq: int = 512,
    batch: int = 1,
    dtype: str = "bfloat16",
    train: bool = False,
    optimizer: str = "adamw",
    full: bool = False,
    timeout: float = 3600.0,
) -> Projection:
    """Project the peak memory of SOURCE at full depth (see the module docstring).

    `full=True` also measures the full-depth model, to check the projection (it must fit).
    """
    from tinykit._progress import stage
    from tinykit.source import resolve

    if dtype not in DTYPE_BYTES:
        raise UsageError(f"--dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}.")
    if optimizer not in OPTIMIZER_STATES:
        raise UsageError(f"--optimizer {optimizer!r}: use one of {', '.join(OPTIMIZER_STATES)}.")
    if seq < 1 or batch < 1:
        raise UsageError(f"--seq {seq} --batch {batch}: both must be at least 1.")
    src = resolve(source)
    plan = plan_projection(src.config, layers)
    step = {"seq": seq, "batch": batch, "dtype": dtype, "train": train, "optimizer": optimizer}
    measured: dict[str, dict[str, Any]] = {}
    for key, config in plan.configs.items():
        stage(f"measuring {key} ({sum(plan.counts[key].values())} layers) in a fresh process")
        m = _measure(config, step, timeout)
        measured[key] = {**m, "layers": plan.counts[key]}
    fixed, per_layer = fit(measured, "peak")
    fixed_params, per_params = fit(measured, "params")
    projected = round(fixed + sum(c * plan.types[t] for t, c in per_layer.items()))
    params = round(fixed_params + sum(c * plan.types[t] for t, c in per_params.items()))
    width = DTYPE_BYTES[dtype]
    analytic = {"weights": params * width}
    if train:
        analytic["gradients"] = params * width
        analytic["optimizer state"] = params * width * OPTIMIZER_STATES[optimizer]
    analytic["total"] = sum(analytic.values())
    result = Projection(
        src.name,
        measured["base"]["where"],
        train,
        optimizer if train else None,
        dtype,
        seq,
        batch,
        plan.stack,
        plan.depth,
        plan.types,
        measured,
        round(fixed),
        {t: round(c) for t, c in per_layer.items()},
        projected,
        params,
        analytic,
    )
    if full:
        _check_fits(result)
        stage(f"measuring the full depth ({plan.depth} layers) in a fresh process")
        try:
            result.full = _measure(src.config, step, timeout)
        except (MemoryError, RuntimeError, ChildProcessFailed) as e:
            if not _out_of_memory(e):
                raise
            raise SetupError(
                f"--full: {src.name} at its full depth ({plan.depth} layers) does not fit in "
                f"{result.where} memory ({_first_line(e)}); the projection is "
                f"{format_bytes(projected)}. Drop --full, or run on a larger machine."
            ) from None
    return result


def _check_fits(result: Projection) -> None:
    """Refuse --full before it starts when the projection exceeds the memory available now."""
    import psutil

    if result.where == "host":
        available = psutil.virtual_memory().available
    else:
        import torch

        available = torch.cuda.mem_get_info(torch.device(result.where))[0]
    if result.projected > available:
        raise SetupError(
            f"--full: {result.source} at its full depth ({result.depth} layers) is projected at "
            f"{format_bytes(result.projected)}, more than the {format_bytes(available)} of "
            f"{result.where} memory available. Drop --full, or run on a larger machine."
        )


def _out_of_memory(e: BaseException) -> bool:
    """An allocation failure in the child, or the child killed (the OOM killer's SIGKILL)."""
    if isinstance(e, MemoryError):
        return True
    if isinstance(e, ChildProcessFailed):
        return getattr(e, "returncode", None) == -9 or "memory" in str(e).lower()
    text = str(e).lower()
    return "out of memory" in text or "can't allocate memory" in text or "not enough memory" in text


def _first_line(e: BaseException) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)


# glibc caches freed heap and raises its mmap threshold as large blocks come and go, so the RSS
# of two runs of one step differs by more than a layer costs. A fixed threshold maps every large
# block on its own and unmaps it when freed: RSS then follows the live memory.
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_ARENA_MAX": "2"}


def _measure(config: dict[str, Any], step: dict[str, Any], timeout: float) -> dict[str, Any]:
    import os

    from tinykit._child import Child

    env = {**os.environ, **STEADY_MALLOC}
    return Child("tinykit.memory.project:measure_step", (config,), step, env=env).result(timeout)


def fit(measured: dict[str, dict[str, Any]], what: str) -> tuple[float, dict[str, float]]:
    """Solve value = fixed + sum(cost[t] * layers[t]) over the measured configs (one variant
    per type that has more layers than the base, so the system is square). A type with no
    more layers than the base holds is in every config whole: its cost is part of `fixed`."""
    import numpy as np

    types = [key[1:] for key in measured if key != "base"]
    rows = [[1.0, *(m["layers"][t] for t in types)] for m in measured.values()]
    values = [float(m[what]) for m in measured.values()]
    solution = np.linalg.lstsq(np.array(rows), np.array(values), rcond=None)[0]
    return float(solution[0]), dict(zip(types, map(float, solution[1:]), strict=True))


def measure_step(
    raw: dict[str, Any], *, seq: int, batch: int, dtype: str, train: bool, optimizer: str
) -> dict[str, Any]:
    """In a fresh process: build `raw` at random weights and measure one forward (or two
    training steps: the second is the steady state, with optimizer state allocated)."""
    import torch

    from tinykit.memory.track import settle, track_memory
    from tinykit.model.build import class_and_config
    from tinykit.model.config import load_config
    from tinykit.model.inputs import make_inputs

    cls, config = class_and_config(raw, load_config(raw), name="projection")
    device = "cuda" if torch.cuda.is_available() else "cpu"  # GPU paths: untested here
    torch.manual_seed(0)
    model = cls._from_config(config, dtype=getattr(torch, dtype))
    # made beside the host copy: the maker's trial forwards (layouts, image tokens) run there
    made = make_inputs(model, batch=batch, seq=seq, labels=train).to(device, model.dtype)
    model = model.to(device)
    settle()
    with track_memory() as m:
        if train:
            model.train()
            opt_cls = torch.optim.SGD if optimizer == "sgd" else torch.optim.AdamW
            opt = opt_cls(model.parameters(), lr=1e-4)
            for _ in range(2):
                out = model(**made.forward, **made.labels)
                out.loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                del out
        else:
            model.eval()
            with torch.no_grad():
                model(**made.forward, use_cache=False)
    device_peak = m.devices and max(d.peak_allocated for d in m.devices.values())
    return {
        "peak": int(device_peak) if device_peak else m.host_peak,
        "where": next(iter(m.devices), "host") if device_peak else "host",
        "params": sum(p.numel() for p in model.parameters()),
    }
