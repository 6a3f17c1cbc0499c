"""`tinykit coverage`: build and verify every text model type of the installed transformers."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from tinykit.cli import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "coverage",
        help="build + verify every text model type of this transformers",
        description="Sweep every model type transformers maps to a causal, masked or "
        "seq2seq LM class, build it from its bare model_type, verify it, and report "
        "pass/fail with the reason per type.",
    )
    p.add_argument("model_types", nargs="*", help="only these model types")
    p.add_argument("--json", action="store_true", help="print a machine-readable report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinykit.model.coverage import sweep

    rows = []
    for row in sweep(args.model_types or None):
        rows.append(row)
        if not args.json:  # stream: a full sweep takes minutes
            print(
                f"{'PASS' if row.ok else 'FAIL'} {row.model_type:32s} {row.params:>9,} params "
                f"{row.seconds:6.2f}s" + ("" if row.ok else f"  {row.reason}"),
                flush=True,
            )
    passed = sum(r.ok for r in rows)
    upstream = [r.model_type for r in rows if r.upstream]
    buildable = len(rows) - len(upstream)
    summary: dict[str, Any] = {
        "passed": passed,
        "total": len(rows),
        "rate": round(passed / max(1, len(rows)), 4),
        "upstream_broken": upstream,
        "rate_buildable": round(passed / max(1, buildable), 4),
        "rows": [dataclasses.asdict(r) for r in rows],
    }
    emit(
        summary,
        args.json,
        f"{passed}/{len(rows)} text model types pass ({100 * summary['rate']:.1f}%); "
        f"{passed}/{buildable} ({100 * summary['rate_buildable']:.1f}%) of the types whose own "
        f"default config transformers builds (not buildable upstream: {', '.join(upstream) or 'none'})",
    )
    return 0
