"""The numerics recorder's data: one `TensorSummary` per tensor, one `Record` per module call,
and the walk that finds the tensors inside a call's arguments and outputs (nested tuples, lists,
dicts, `ModelOutput`s) with the labels reports use ("input[0]", "output.logits")."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# What a Record is (`Record.kind`; also the "kind" of a dump's index lines and of reports).
FORWARD = "forward"  # a module call
GRAD = "grad"  # a module's backward: the gradient it received and the one it passed on
PROBE = "probe"  # values named with `tinykit.probe`
RECOMPUTE = "recompute"  # a forward that activation checkpointing re-runs during backward
# The step's own records (`tinykit.record`): what a top-level call of the model was given, the
# model's parameters as that step began, and the loss it returned. A data or an optimizer bug
# shows in these first, before any module's output.
INPUT = "input"  # the tensors of a top-level call, by argument name ("labels", "args[0]")
PARAMS = "params"  # every parameter of the model at the start of a step, by qualified name
LOSS = "loss"  # the `loss` a top-level call returned
STEP_KINDS = (INPUT, PARAMS, LOSS)


@dataclass(frozen=True, slots=True)
class TensorSummary:
    """One tensor, reduced to what two runs are compared on. (Slots: a recording makes hundreds
    per step, and each instance dict was one more object for the garbage collector to scan.)"""

    hash: str
    shape: tuple[int, ...]
    dtype: str
    mean: float | None = None
    std: float | None = None
    absmax: float | None = None
    values: Any = None  # a flat CPU copy: small tensors always, any size when a tolerance is used
    name: str = ""  # where it was found: "input[0]", "input.labels", "output.logits", "weight"
    absmin: float | None = None
    min: float | None = None
    max: float | None = None
    nonzero_absmin: float | None = None  # the smallest |x| > 0: how close to underflow
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    zeros: int | None = None

    def renamed(self, name: str) -> TensorSummary:
        """The same summary under another label (a tensor seen again as another call's input);
        ~4x faster than dataclasses.replace, which runs __init__ again."""
        copy = object.__new__(TensorSummary)
        for slot in self.__slots__:
            object.__setattr__(copy, slot, getattr(self, slot))
        object.__setattr__(copy, "name", name)
        return copy

    @property
    def finite(self) -> bool:
        return not (self.nan or self.posinf or self.neginf)

    def flags(self) -> str:
        """ "NaN! +Inf!" style flags, "" when the tensor is finite."""
        found = [(self.nan, "NaN"), (self.posinf, "+Inf"), (self.neginf, "-Inf")]
        return " ".join(f"{label}!({n})" for n, label in found if n)

    def stats(self) -> str:
        if self.mean is None:
            return f"{self.dtype}{list(self.shape)}"
        return (
            f"{self.dtype}{list(self.shape)} mean={self.mean:.6g} std={self.std:.6g} "
            f"absmax={self.absmax:.6g}"
        )


@dataclass(slots=True)
class Record:
    """One module call (`forward`), one module backward (`grad`) or one `probe`.

    For `grad`, `inputs` are the gradients of the module's outputs (what its backward received)
    and `outputs` its share of the gradients of its inputs (what its backward produced).
    """

    seq: int  # start order: a forward record gets it before its children run
    module: str
    kind: str  # FORWARD, GRAD, PROBE, RECOMPUTE, or one of STEP_KINDS
    call: int  # how many times this (module, kind) was recorded before in this run
    inputs: list[TensorSummary] = field(default_factory=list)
    outputs: list[TensorSummary] = field(default_factory=list)
    state: str = ""  # hash of the parameters and buffers of the module and its submodules
    parent: str = ""  # the module whose forward called this one ("" for a root)
    step: int = 0
    cls: str = ""  # the module's class name
    params: list[TensorSummary] = field(default_factory=list)  # its own, with what="param"

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.module, self.kind, self.call)


def iter_tensors(value: Any) -> Iterator[torch.Tensor]:
    """Tensors inside nested tuples, lists and mappings (ModelOutput is a mapping), in order."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from iter_tensors(v)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from iter_tensors(v)


def named_tensors(value: Any, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    """(label, tensor) pairs in `iter_tensors` order: "input[0]", "output.logits", "output[1][0]"."""
    return iter(_collect(value, prefix, []))


def _collect(
    value: Any, prefix: str, out: list[tuple[str, torch.Tensor]]
) -> list[tuple[str, torch.Tensor]]:
    # Every module call runs this on its arguments and outputs: a list and a type test before
    # any label is built (a decoder layer's half-dozen keyword arguments are mostly None and
    # flags), ~3x faster than nested generators.
    import torch

    if isinstance(value, torch.Tensor):
        out.append((prefix, value))
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if v is not None and not isinstance(v, _SCALARS):
                _collect(v, f"{prefix}.{k}", out)
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            if v is not None and not isinstance(v, _SCALARS):
                _collect(v, f"{prefix}[{i}]", out)
    return out


_SCALARS = (bool, int, float, str)


def call_tensors(args: Any, kwargs: Any) -> list[tuple[str, torch.Tensor]]:
    out = _collect(tuple(args), "input", [])
    return _collect(kwargs, "input", out) if kwargs else out


def argument_tensors(args: Any, kwargs: Any) -> list[tuple[str, torch.Tensor]]:
    """A call's tensors named as the caller passed them: "args[0]", "labels",
    "pixel_values", "past_key_values[0][1]" (the names of a step's "input" record)."""
    out = _collect(tuple(args), "args", [])
    for k, v in (kwargs or {}).items():
        if v is not None and not isinstance(v, _SCALARS):
            _collect(v, k, out)
    return out


def output_tensors(output: Any) -> list[tuple[str, torch.Tensor]]:
    if isinstance(output, (tuple, list)) and len(output) == 1:
        output = output[0]
    return _collect(output, "output", [])


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


RawTensors = tuple[list[tuple[str, "torch.Tensor"]], list[tuple[str, "torch.Tensor"]]]
