"""ShrinkSpec: the sizes a tiny model is built to, with their documented bounds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from tinykit.errors import ShrinkConstraintError

DTYPES = ("float32", "bfloat16", "float16")
MODES = ("tiny", "faithful")


@dataclass(frozen=True, kw_only=True)
class ShrinkSpec:
    """The target sizes. Every field is an upper bound: a source that is already smaller keeps its value."""

    hidden: int = 32
    """Model width (hidden_size, d_model, n_embd, ...): 8..1024, a multiple of `heads`."""
    layers: int | Literal["auto"] = "auto"
    """Depth of each stack: 'auto' keeps one layer of every distinct block type (at least 2); or 1..64."""
    heads: int = 4
    """Attention heads: 1..64, at most `hidden`."""
    kv_heads: int = 2
    """Key/value heads for grouped-query sources: 1..heads and dividing `heads`."""
    intermediate: int = 64
    """MLP width (intermediate_size, d_ff, ffn_dim, ...): 4..4096."""
    vocab: int = 1024
    """Vocabulary size after shrinking the tokenizer: 64..65536 (faithful mode keeps the source's)."""
    experts: int = 4
    """Routed experts of MoE sources: 2..64 (at least 2, so the router path is real)."""
    experts_per_tok: int = 2
    """Experts each token is routed to: 1..experts."""
    expert_intermediate: int = 32
    """Per-expert MLP width (moe_intermediate_size, ...): 4..4096."""
    max_positions: int = 512
    """Cap on max_position_embeddings and friends: 32..65536."""
    window: int = 8
    """Cap on sliding-window sizes, small so that sliding attention really masks in tests: 2..65536."""
    image_size: int = 32
    """Cap on vision image sizes: 8..1024, a multiple of the patch size."""
    patch_size: int = 8
    """Cap on vision patch sizes: 1..image_size."""
    dtype: str = "float32"
    """Weights dtype: float32, bfloat16 or float16."""
    seed: int = 0
    """Seed of the random weights: 0..2**32-1."""
    mode: str = "tiny"
    """'tiny' shrinks the tokenizer to `vocab`; 'faithful' keeps the real tokenizer and its vocab."""

    def __post_init__(self) -> None:
        bounds = {
            "hidden": (8, 1024),
            "heads": (1, 64),
            "kv_heads": (1, 64),
            "intermediate": (4, 4096),
            "vocab": (64, 65536),
            "experts": (2, 64),
            "experts_per_tok": (1, 64),
            "expert_intermediate": (4, 4096),
            "max_positions": (32, 65536),
            "window": (2, 65536),
            "image_size": (8, 1024),
            "patch_size": (1, 1024),
            "seed": (0, 2**32 - 1),
        }
        if self.layers != "auto":
            bounds["layers"] = (1, 64)
        for name, (lo, hi) in bounds.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                _fail(name, value, f"must be an integer in [{lo}, {hi}]")
        _check(self.dtype in DTYPES, "dtype", self.dtype, f"must be one of {', '.join(DTYPES)}")
        _check(self.mode in MODES, "mode", self.mode, f"must be one of {', '.join(MODES)}")
        _check(
            self.heads <= self.hidden, "heads", self.heads, f"must not exceed hidden={self.hidden}"
        )
        _check(
            self.hidden % self.heads == 0,
            "hidden",
            self.hidden,
            f"must be a multiple of heads={self.heads} (e.g. {self.heads * max(1, self.hidden // self.heads)})",
        )
        _check(
            self.kv_heads <= self.heads and self.heads % self.kv_heads == 0,
            "kv_heads",
            self.kv_heads,
            f"must divide heads={self.heads}",
        )
        _check(
            (self.hidden // self.heads) % 2 == 0,
            "hidden",
            self.hidden,
            f"hidden/heads={self.hidden / self.heads:g} must be even (RoPE rotates pairs)",
        )
        _check(
            self.experts_per_tok <= self.experts,
            "experts_per_tok",
            self.experts_per_tok,
            f"must not exceed experts={self.experts}",
        )
        _check(
            self.patch_size <= self.image_size and self.image_size % self.patch_size == 0,
            "patch_size",
            self.patch_size,
            f"must divide image_size={self.image_size}",
        )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ShrinkSpec:
        """Build a spec from keyword overrides; None values mean 'default'."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise ShrinkConstraintError(
                f"unknown shrink option(s) {', '.join(unknown)}. Valid options: {', '.join(sorted(names))}.",
                field=unknown[0],
                value=kwargs[unknown[0]],
                constraint="known option",
            )
        return cls(**{k: v for k, v in kwargs.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def changed(self) -> dict[str, Any]:
        """The fields that differ from the defaults: the spec's canonical, minimal form."""
        default = ShrinkSpec()
        return {k: v for k, v in self.to_dict().items() if v != getattr(default, k)}


class ShrinkOptions(TypedDict, total=False):
    """ShrinkSpec's fields as keyword arguments (``make_tiny(..., hidden=64)``); None = default.

    Kept equal to ShrinkSpec's fields by tests/test_spec.py.
    """

    hidden: int | None
    layers: int | Literal["auto"] | None
    heads: int | None
    kv_heads: int | None
    intermediate: int | None
    vocab: int | None
    experts: int | None
    experts_per_tok: int | None
    expert_intermediate: int | None
    max_positions: int | None
    window: int | None
    image_size: int | None
    patch_size: int | None
    dtype: str | None
    seed: int | None
    mode: str | None


def _check(ok: bool, field: str, value: object, constraint: str) -> None:
    if not ok:
        _fail(field, value, constraint)


def _fail(field: str, value: object, constraint: str) -> None:
    raise ShrinkConstraintError(
        f"shrink option {field}={value!r} {constraint}. Pass a value that satisfies it "
        f"(see `tinykit make-tiny --help`).",
        field=field,
        value=value,
        constraint=constraint,
    )
