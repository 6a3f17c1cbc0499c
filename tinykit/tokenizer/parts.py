"""What a tokenizer is made of besides its vocabulary, and which of its tokens must survive.

A tokenizer is composed from parts: the vocabulary of one source, the added/special tokens,
tokenizer config and chat template of another (`Parts.tokens`), a template file, tokens to add
and special-token roles to set. The model's config names special tokens by id
(`bos_token_id`, `eos_token_id`, `image_token_index`, ...): every one of those ids gets a token
(the source's, the family's, the class's token of that role, else a new `<|role|>` token), so the
tiny config's ids can be remapped to the tiny tokenizer's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinykit._configs import from_dict
from tinykit.tokenizer.family import Family

# Config keys that hold special-token ids (the same suffixes the config shrink remaps).
ID_SUFFIXES = ("_token_id", "_token_ids", "_token_index")
# Roles a tokenizer config names by token and a model config by id: `<role>_token(_id)`.
ROLES = ("bos", "eos", "pad", "unk", "sep", "cls", "mask")


@dataclass(frozen=True)
class Parts:
    """A tokenizer's parts beside its vocabulary source (all optional)."""

    tokens: Path | None = None
    """A folder whose tokenizer config, added/special tokens and chat template replace the
    vocabulary source's (Phi-3's tokens on Llama-2's vocab)."""
    template: Path | None = None
    """A Jinja file: the tokenizer's only chat template."""
    add_tokens: tuple[str, ...] = ()
    """Tokens added as whole tokens (not special), as `tokenizer.add_tokens` would."""
    special_tokens: Mapping[str, Any] = field(default_factory=dict)
    """Roles set as `tokenizer.add_special_tokens` would: {"pad_token": "<pad>",
    "additional_special_tokens": [...]}; new tokens are added."""
    config_ids: tuple[tuple[str, int], ...] = ()
    """(key, id) of every special-token id the model's config and generation config name."""
    model_vocab: int | None = None
    """The model config's vocab_size: a tiktoken file's special block fills it up."""
    family: Family = field(default_factory=Family)


def model_token_ids(*trees: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """(key, id) of the special-token ids in config/generation-config dicts, nested ones too."""
    found: dict[tuple[str, int], None] = {}

    def walk(node: Any) -> None:
        if not isinstance(node, Mapping):
            return
        for key, value in node.items():
            if isinstance(key, str) and key.endswith(ID_SUFFIXES):
                values = value if isinstance(value, list) else [value]
                for v in values:
                    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                        found.setdefault((key, v))
            else:
                walk(value)

    for tree in trees:
        walk(tree)
    return tuple(found)


def config_with_defaults(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A model config dict with its class's defaults filled in (a bare `{"model_type": "glm4"}`
    names GLM-4's eos ids too); as it is for a type transformers lacks or a malformed one."""
    from transformers import CONFIG_MAPPING

    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return dict(raw)
    try:
        config = from_dict(
            CONFIG_MAPPING[model_type], {k: v for k, v in raw.items() if k != "auto_map"}
        )
    except Exception:  # transformers raises many kinds on a malformed config: the model build says
        return dict(raw)
    return config.to_dict()


def read_json(path: Path) -> dict:
    return json.loads(path.read_text("utf-8")) if path.is_file() else {}


def token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def named_special_tokens(config: Mapping[str, Any]) -> set[str]:
    """Special tokens a tokenizer_config.json / special_tokens_map.json names."""
    named: set[str | None] = set()
    for key, value in config.items():
        if key.endswith("_token"):
            named.add(token_text(value))
        elif key in ("additional_special_tokens", "extra_special_tokens"):
            values = value.values() if isinstance(value, dict) else value or []
            named.update(token_text(v) for v in values)
    return {t for t in named if t is not None}


def chat_templates(folder: Path | None, config: Mapping[str, Any]) -> str:
    """All chat-template text of the source, concatenated (to find the tokens it uses)."""
    texts = []
    tpl = config.get("chat_template")
    if isinstance(tpl, list):
        texts += [t.get("template", "") for t in tpl]
    elif isinstance(tpl, str):
        texts.append(tpl)
    if folder is not None:
        if (folder / "chat_template.jinja").is_file():
            texts.append((folder / "chat_template.jinja").read_text("utf-8"))
        texts.append(str(read_json(folder / "chat_template.json").get("chat_template", "")))
    return "\n".join(texts)


def essential_tokens(
    folder: Path | None,
    config: Mapping[str, Any],
    added: Iterable[dict],
    by_id: Mapping[int, str],
    parts: Parts,
) -> set[str]:
    """Added tokens that must survive: named specials, chat-template and config-referenced
    ones, and every token the parts add."""
    added = list(added)
    essential = named_special_tokens(config)
    template = chat_templates(folder, config)
    if parts.template is not None and parts.template.is_file():  # the template that will ship
        template += "\n" + parts.template.read_text("utf-8")
    essential |= {a["content"] for a in added if a["content"] in template}
    essential |= {by_id[i] for _, i in parts.config_ids if i in by_id}
    # T5-style sentinels: the tokenizer class re-creates all `extra_ids` of them on load anyway
    essential |= {a["content"] for a in added if a["content"].startswith("<extra_id_")}
    essential |= set(parts.add_tokens) | named_special_tokens(parts.special_tokens)
    return essential


def role_of(key: str) -> str:
    """`eos_token_id` -> "eos", `image_token_index` -> "image"."""
    for suffix in ID_SUFFIXES:
        key = key.removesuffix(suffix)
    return key


def name_config_ids(
    config_ids: Iterable[tuple[str, int]],
    known: Mapping[int, str],
    roles: Mapping[str, str],
    own: Mapping[int, str] | None = None,
) -> dict[int, str]:
    """A token for every id the model config names: the source's or family's token of that id
    (`known`), else the tokenizer's token of the id's role (`roles`: {"eos": "</s>"}) when no
    other id took it, else, for a role the tokenizer has no token of, its own special token at
    that id (`own`: a pad id 0 on a trained GPT-2 vocabulary is `<|endoftext|>`, so the id stays
    0 and still indexes the model's small tables: RoCBert's pronunciation embeddings), else a
    new `<|role|>` token (`<|eos_1|>` for a list's second id)."""
    own = own or {}
    names: dict[int, str] = {}
    taken = set(known.values())
    seen: dict[str, int] = {}
    for key, i in config_ids:
        role = role_of(key)
        nth = seen.get(role, 0)
        seen[role] = nth + 1
        if i in names:
            continue
        if i in known:
            names[i] = known[i]
            continue
        if role not in roles and i in own and own[i] not in taken:
            names[i] = own[i]  # shared, as GPT-2's pad and eos are: it takes no role's token
            continue
        token = roles.get(role) if nth == 0 else None
        if token is None or token in taken:
            token = f"<|{role}|>" if nth == 0 else f"<|{role}_{nth}|>"
            while token in taken:
                token = token[:-2] + "_|>"
        names[i] = token
        taken.add(token)
    return names


def role_tokens(config_ids: Iterable[tuple[str, int]], names: Mapping[int, str]) -> dict[str, str]:
    """`{"eos_token": ...}` for each role the model config names by id (its first id)."""
    found: dict[str, str] = {}
    for key, i in config_ids:
        role = role_of(key)
        if role in ROLES and i in names:
            found.setdefault(f"{role}_token", names[i])
    return found
