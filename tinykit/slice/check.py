"""`slice --check`: the slice computes exactly what the full model computes over the kept layers.

The reference is the full model with its layer lists cut to the kept layers (and the same
per-layer config fields rewritten), run on the same seeded input in float32 on CPU. For a
prefix slice that is the full model's hidden state after layer N, then its final norm and
head; for other plans, the full model with the other layers skipped. Outputs must be
`torch.equal`, not merely close: the slice holds the very same weights.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinykit.errors import CheckFailed

if TYPE_CHECKING:
    from tinykit.slice.plan import Stack


def load(folder: Path) -> Any:
    """The folder's model in float32 and eval mode, through its architectures[0] class."""
    import torch
    from transformers.utils import logging as hf_logging

    from tinykit.model.load import load_model

    hf_logging.disable_progress_bar()
    return load_model(folder, dtype=torch.float32).eval()


def truncate(model: Any, layer_map: dict[str, list[int]], stacks: list[Stack]) -> None:
    """Cut `model`'s layer lists to the kept layers and rewrite its config as the slice's."""
    import torch

    lists = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.ModuleList)}
    for prefix, kept in layer_map.items():
        name = _module_for(prefix, kept, lists)
        if name is None:
            raise CheckFailed(
                f"--check found no layer list for weights {prefix}.N.* in "
                f"{type(model).__name__}. Check the slice by hand, or report the model class."
            )
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        layers = getattr(parent, attr)
        setattr(parent, attr, torch.nn.ModuleList([layers[i] for i in kept]))
    for stack in stacks:
        node = model.config
        for part in filter(None, stack.path.split(".")):
            node = getattr(node, part)
        for key, value in stack.fields.items():
            setattr(node, key, value)


def _module_for(prefix: str, kept: list[int], lists: dict[str, Any]) -> str | None:
    """The module path of the layer list whose checkpoint keys start with `prefix`.

    Checkpoint keys and module paths can differ (`language_model.model.layers` is saved for
    the module `model.language_model.layers`): same last name, most words in common.
    """
    if prefix in lists:
        return prefix
    words = set(prefix.split("."))
    last = prefix.rsplit(".", 1)[-1]
    scored = sorted(
        (len(words & set(n.split("."))), n)
        for n, m in lists.items()
        if n.rsplit(".", 1)[-1] == last and len(m) > max(kept)
    )
    if not scored or (len(scored) > 1 and scored[-1][0] == scored[-2][0]):
        return None
    return scored[-1][1]


def run(model: Any) -> dict[str, Any]:
    """The model's output tensors on make_inputs' seeded inputs (the same for slice and full)."""
    import torch

    from tinykit.model.inputs import make_inputs

    kwargs = make_inputs(model).forward
    if "use_cache" in inspect.signature(model.forward).parameters:
        kwargs["use_cache"] = False  # caches are sized by layer index; the check needs none
    with torch.no_grad():
        output = model(**kwargs)
    return {k: v for k, v in output.items() if isinstance(v, torch.Tensor)}


def check_slice(
    full_folder: Path, slice_folder: Path, layer_map: dict[str, list[int]], stacks: list[Stack]
) -> dict[str, Any]:
    """Compare the slice with the truncated full model; raise CheckFailed on any difference."""
    import torch

    sliced = load(slice_folder)
    got = run(sliced)
    del sliced
    full = load(full_folder)
    truncate(full, layer_map, stacks)
    want = run(full)
    report: dict[str, Any] = {}
    for key in sorted(set(got) & set(want)):
        same = got[key].shape == want[key].shape and torch.equal(got[key], want[key])
        diff = (
            (got[key] - want[key]).abs().max().item() if got[key].shape == want[key].shape else None
        )
        report[key] = {"equal": same, "max_abs_diff": diff}
    if not report:
        raise CheckFailed(
            f"--check: the slice and the full model share no output tensor ({sorted(got)})."
        )
    bad = [k for k, v in report.items() if not v["equal"]]
    if bad:
        raise CheckFailed(
            f"--check: the slice's {', '.join(bad)} differ from the full model's over the kept "
            f"layers (max abs diff {max(report[k]['max_abs_diff'] or 0 for k in bad):.3g}). "
            "Report it with the source id and --layers."
        )
    return report
