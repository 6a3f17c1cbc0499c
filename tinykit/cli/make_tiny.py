"""`tinykit make-tiny SOURCE`: build a tiny random model (adapter over tinykit.model.build)."""

from __future__ import annotations

import argparse
import dataclasses

from tinykit.cli import emit


def _layers(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {value!r}") from None


def _role(value: str) -> tuple[str, str]:
    role, sep, token = value.partition("=")
    if not sep or not role.endswith(("_token", "_tokens")) or not token:
        raise argparse.ArgumentTypeError(
            f"expected ROLE=TOKEN with a role such as pad_token or additional_special_tokens, "
            f"got {value!r}"
        )
    return role, token


def _roles(pairs: list[tuple[str, str]] | None) -> dict[str, str | list[str]] | None:
    """`--special-token` pairs as special_tokens: a `..._tokens` role collects a list."""
    if not pairs:
        return None
    roles: dict[str, str | list[str]] = {}
    for role, token in pairs:
        if role.endswith("_tokens"):
            listed = roles.setdefault(role, [])
            assert isinstance(listed, list)
            listed.append(token)
        else:
            roles[role] = token
    return roles


def register(sub: argparse._SubParsersAction) -> None:
    from tinykit.model.spec import ShrinkSpec

    p = sub.add_parser(
        "make-tiny",
        help="build a tiny random model from a Hub id, a folder or a model_type",
        description="Build a tiny random-weight model that keeps every block type of SOURCE "
        "(a folder with config.json, a transformers model_type such as qwen3_moe, or a Hub id "
        "org/name[@revision]; Hub ids download config/tokenizer/processor files only, never weights).",
    )
    p.add_argument("source")
    p.add_argument("-o", "--out", help="output folder (default: ./tiny-<name>)")
    p.add_argument("--revision", help="Hub revision: branch, tag or commit sha")
    docs = {f.name: f for f in dataclasses.fields(ShrinkSpec)}
    for name in (
        "hidden",
        "heads",
        "kv_heads",
        "intermediate",
        "vocab",
        "experts",
        "experts_per_tok",
        "expert_intermediate",
        "max_positions",
        "window",
        "image_size",
        "patch_size",
        "seed",
    ):
        p.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            dest=name,
            metavar="N",
            help=f"default {docs[name].default}",
        )
    p.add_argument(
        "--layers",
        type=_layers,
        metavar="N|auto",
        help="layers per stack; auto keeps one of every block type (default)",
    )
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="default float32")
    p.add_argument(
        "--mode",
        choices=["tiny", "faithful"],
        help="tiny shrinks the vocab (default); faithful keeps the real tokenizer",
    )
    p.add_argument(
        "--class",
        dest="model_class",
        metavar="NAME",
        help="build as this transformers class of the model type (e.g. BertModel, "
        "LlamaForSequenceClassification); default: the source's architectures",
    )
    p.add_argument(
        "--task",
        metavar="TASK",
        help="build as the type's class for this task: causal-lm, masked-lm, seq2seq, "
        "sequence-classification, token-classification, question-answering, base, ... "
        "(any transformers auto-mapping task)",
    )
    p.add_argument(
        "--num-labels", type=int, metavar="N", help="labels of a classification head (1..1000)"
    )
    p.add_argument(
        "--exact-vocab",
        action="store_true",
        help="pad the tiny tokenizer to exactly --vocab ids, so the model vocab is --vocab",
    )
    p.add_argument(
        "--preset",
        metavar="NAME",
        help="shape preset whose sizes replace the defaults (hub-tiny-random: hidden 16, 4 heads, "
        "2 layers, as the Hub's tiny-random repos); explicit sizes still win",
    )
    p.add_argument(
        "--tokenizer",
        metavar="SOURCE",
        help="take the tokenizer and its special tokens from this folder, Hub id or model_type",
    )
    p.add_argument(
        "--tokens-from",
        metavar="SOURCE",
        help="compose the tokenizer: the tokenizer config, added/special tokens and chat template "
        "of this folder or Hub id, on the vocabulary of the source (or of --tokenizer)",
    )
    p.add_argument(
        "--chat-template",
        metavar="FILE",
        help="a Jinja file that replaces the tokenizer's chat template",
    )
    p.add_argument(
        "--add-token",
        action="append",
        dest="add_tokens",
        metavar="TOKEN",
        help="add TOKEN to the tokenizer as a whole token, not special (repeatable)",
    )
    p.add_argument(
        "--special-token",
        action="append",
        dest="special_tokens",
        type=_role,
        metavar="ROLE=TOKEN",
        help="set a special-token role, adding the token: pad_token=<pad>; "
        "additional_special_tokens=<|tool|> (repeatable; a list role collects every value)",
    )
    p.add_argument(
        "--pooling",
        metavar="MODE",
        help="add a sentence-transformers front end (modules.json, 1_Pooling) with this pooling "
        "(mean, cls, max, mean_sqrt_len); a source's own modules.json is kept without it",
    )
    p.add_argument(
        "--recipe",
        action="append",
        default=[],
        metavar="PATH",
        help="extra recipe TOML file (repeatable)",
    )
    p.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    p.add_argument(
        "--push-to-hub", metavar="ORG/NAME", help="publish the built folder to this Hub repo"
    )
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow configs that need the repository's own code (auto_map)",
    )
    p.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="skip the forward/backward/size check that runs before the folder is written",
    )
    p.add_argument("--json", action="store_true", help="print a machine-readable result")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinykit._suggest import check_source

    check_source(args.source)  # before the heavy imports: a typo answers in well under a second
    for other in (args.tokenizer, args.tokens_from):
        if other is not None:
            check_source(other)
    from tinykit.model.build import make_tiny
    from tinykit.model.spec import ShrinkSpec

    spec = {f.name: getattr(args, f.name) for f in dataclasses.fields(ShrinkSpec)}
    result = make_tiny(
        args.source,
        args.out,
        revision=args.revision,
        force=args.force,
        trust_remote_code=args.trust_remote_code,
        recipes=tuple(args.recipe),
        push_to_hub=args.push_to_hub,
        check=args.check,
        model_class=args.model_class,
        task=args.task,
        num_labels=args.num_labels,
        exact_vocab=args.exact_vocab,
        preset=args.preset,
        tokenizer=args.tokenizer
        if args.tokens_from is None
        else {"vocab": args.tokenizer, "tokens": args.tokens_from},
        chat_template=args.chat_template,
        add_tokens=args.add_tokens,
        special_tokens=_roles(args.special_tokens),
        pooling=args.pooling,
        **spec,
    )
    layers = ", ".join(f"{k}: {v}" for k, v in result.layers.items())
    emit(
        result.to_dict(),
        args.json,
        f"{result.path}: {result.model_class}, {result.params:,} params, {result.bytes:,} bytes, "
        f"{result.seconds:.2f} s (layers kept {layers})"
        + (f"; pushed {result.pushed}" if result.pushed else ""),
    )
    return 0
