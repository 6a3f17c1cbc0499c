"""`tinykit coverage`: build and verify every text model type of the installed transformers."""

from __future__ import annotations

import argparse
import dataclasses

from tinykit.cli import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("coverage", help="build + verify every text model type of this transformers",
                       description="Sweep every model type transformers maps to a causal, masked or "
                       "seq2seq LM class, build it from its bare model_type, verify it, and report "
                       "pass/fail with the reason per type.")
    p.add_argument("model_types", nargs="*", help="only these model types")
    p.add_argument("--json", action="store_true", help="print a machine-readable report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinykit.shrink.coverage import sweep

    rows = sweep(args.model_types or None)
    passed = sum(r.ok for r in rows)
    summary = {"passed": passed, "total": len(rows), "rate": round(passed / max(1, len(rows)), 4),
               "rows": [dataclasses.asdict(r) for r in rows]}
    lines = [f"{'PASS' if r.ok else 'FAIL'} {r.model_type:32s} {r.params:>9,} params {r.seconds:6.2f}s"
             + ("" if r.ok else f"  {r.reason}") for r in rows]
    lines.append(f"{passed}/{len(rows)} text model types pass ({100 * summary['rate']:.1f}%)")
    emit(summary, args.json, "\n".join(lines))
    return 0
