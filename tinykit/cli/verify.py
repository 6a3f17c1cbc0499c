"""`tinykit verify DIR`: load a tiny model and prove it trains, generates and reloads."""

from __future__ import annotations

import argparse

from tinykit.cli import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="check a tiny model folder: forward, backward, generate, reload",
        description="Load DIR, run forward + backward (finite loss), generate for "
        "generative text models, reload and compare logits; exit 1 on any failure.",
    )
    p.add_argument("path")
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run the folder's own model code (auto_map in config.json); read it first",
    )
    p.add_argument("--json", action="store_true", help="print a machine-readable report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinykit._suggest import check_folder

    check_folder(args.path)  # before the heavy imports
    from tinykit.model.verify import verify

    r = verify(args.path, trust_remote_code=args.trust_remote_code)
    kinds = sum(len(v) for v in r.block_types.values())
    lines = [
        f"{r.path}: {r.model_class or '(no model class)'}, {r.params:,} params, {r.bytes:,} bytes, loss {r.loss}, "
        f"{r.grads}, generate {r.generated}, reload identical {r.reload_equal}, "
        f"{kinds} block type(s) in {len(r.block_types)} stack(s)"
    ]
    lines += [f"  {stack}: {kind}" for stack, ks in r.block_types.items() for kind in ks]
    lines += [f"  PROBLEM: {p}" for p in r.problems]
    lines.append("OK" if r.ok else "FAILED")
    emit(r.to_dict(), args.json, "\n".join(lines))
    r.raise_if_failed()  # one line on stderr and exit 1, rendered by the CLI's error handler
    return 0
