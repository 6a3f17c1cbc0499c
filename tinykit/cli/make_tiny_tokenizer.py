"""`tinykit make-tiny-tokenizer SOURCE`: shrink a tokenizer folder to a tiny one."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "make-tiny-tokenizer",
        help="shrink a tokenizer (special tokens, chat template kept) to a few hundred ids",
        description="Shrink the tokenizer in a local folder laid out as on the Hub to at most "
        "--vocab ids, keeping special/added tokens, the post-processor and the chat template, "
        "then validate it.",
    )
    p.add_argument("source", help="folder with tokenizer.json / vocab files / tokenizer.model")
    p.add_argument("--vocab", type=int, default=1024, help="maximum number of ids (default 1024)")
    p.add_argument("-o", "--out", help="output folder (default ./tiny-<name>-tokenizer)")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument(
        "--method",
        choices=("auto", "retrain"),
        default="auto",
        help="auto: edit the vocab, train only when there is none; retrain: always retrain",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from tinykit.cli import emit
    from tinykit.tokenizer.build import make_tiny_tokenizer

    result = make_tiny_tokenizer(
        args.source, args.out, vocab=args.vocab, force=args.force, method=args.method
    )
    emit(
        result.to_dict(),
        args.json,
        f"{result.path}: {result.vocab_size} ids, {result.kind} ({result.method}), "
        f"{result.size_bytes / 1024:.1f} KB, {len(result.id_map)} special ids remapped",
    )
    return 0
