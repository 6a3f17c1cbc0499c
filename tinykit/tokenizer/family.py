"""A family's tokenizer knowledge, as data: the `[tokenizer]` table of recipes/<family>.toml.

    [tokenizer]
    class = "LlamaTokenizer"                 # the family's class where transformers' auto
                                             # table names only the generic backend
    special = { 151329 = "<|endoftext|>" }   # the family's special tokens, by their real ids
    added = { 151667 = "<think>" }           # and its added tokens that are not special
    tokens = ["<extra_id_1>"]                # added tokens without a fixed id (not special)
    [tokenizer.tiktoken]                     # the special block after a tiktoken rank file
    block = ["<|begin_of_text|>", ...]       # its first names, in id order
    reserved = "<|reserved_special_token_{}|>"   # names the rest, numbered on

A source's own files always win: this fills in what a config-only or bare source lacks (the
tokens its config's ids name, the tokens its chat template needs, a tiktoken file's block).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tinykit._recipes import family_tables
from tinykit.errors import UsageError


@dataclass(frozen=True)
class Family:
    """The merged `[tokenizer]` tables of every recipe file that lists a model_type."""

    tokenizer_class: str | None = None
    special: dict[int, str] = field(default_factory=dict)
    """The family's special tokens by their id in the real vocabulary."""
    added: dict[int, str] = field(default_factory=dict)
    """Its added tokens that are not special (decoded as text), by id."""
    extra: tuple[str, ...] = ()
    """Its added tokens without a fixed id (chat markers kept whole, not special)."""
    block: tuple[str, ...] = ()
    reserved: str | None = None
    sources: tuple[str, ...] = ()

    def tokens(self) -> list[str]:
        """Every token of the family, special or not: by real id, then the id-less ones."""
        by_id = [t for _, t in sorted({**self.added, **self.special}.items())]
        return list(dict.fromkeys([*by_id, *self.extra]))

    def is_special(self, token: str) -> bool:
        """Whether `token` is special to the family (decode with skip_special_tokens drops it);
        a token the family does not know is (a config's `<|eos|>`)."""
        return token not in {*self.added.values(), *self.extra}

    def block_names(self, size: int) -> list[str]:
        """Names of a tiktoken file's `size`-token special block: `block`, then `reserved`
        numbered on from the reserved names `block` already holds (Llama 3's own numbering)."""
        names = list(self.block[:size])
        pattern = self.reserved or "<|reserved_special_token_{}|>"
        regex = re.compile(re.escape(pattern).replace(r"\{\}", r"(\d+)"))
        taken = [int(m.group(1)) for n in names if (m := regex.fullmatch(n))]
        n = max(taken, default=-1) + 1
        while len(names) < size:
            names.append(pattern.format(n))
            n += 1
        return names


def family_for(model_type: str | None, recipes: tuple[str, ...] = ()) -> Family:
    """The tokenizer knowledge the recipes hold for `model_type` (empty for None or none)."""
    if not model_type:
        return Family()
    cls, block, reserved, sources, extra = None, (), None, [], []
    special: dict[int, str] = {}
    added: dict[int, str] = {}
    for name, data in family_tables(model_type, tuple(recipes)):
        table = data.get("tokenizer")
        if table is None:
            continue
        if not isinstance(table, dict):
            raise UsageError(f"recipe {name}: [tokenizer] must be a table. Fix the file.")
        sources.append(name)
        cls = table.get("class", cls)
        special.update(_by_id(name, "special", table))
        added.update(_by_id(name, "added", table))
        extra += [str(t) for t in table.get("tokens", [])]
        tiktoken = table.get("tiktoken", {})
        block = tuple(tiktoken.get("block", block))
        reserved = tiktoken.get("reserved", reserved)
    return Family(cls, special, added, tuple(extra), block, reserved, tuple(sources))


def _by_id(name: str, key: str, table: dict) -> dict[int, str]:
    try:
        return {int(k): str(v) for k, v in table.get(key, {}).items()}
    except (AttributeError, ValueError) as e:
        raise UsageError(
            f"recipe {name}: [tokenizer] {key} must map token ids to tokens, e.g. "
            f'{key} = {{ 2 = "</s>" }} ({e}). Fix the file.'
        ) from e
