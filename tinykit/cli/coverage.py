"""`tinykit coverage`: build and verify every model type of the installed transformers."""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from tinykit.cli import emit

GROUPS = ("text", "vision", "audio", "video", "multimodal")  # tinykit.model.coverage.GROUPS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "coverage",
        help="build + verify every model type of this transformers",
        description="Sweep every model type transformers maps to a causal, masked or "
        "seq2seq LM class (--all: every type with a model class), build it from its bare "
        "model_type, verify it on inputs of its modality within its size budget, and report "
        "pass/fail with the reason per type and a summary per group.",
    )
    p.add_argument("model_types", nargs="*", help="only these model types")
    p.add_argument(
        "--all", action="store_true", help="every type with a model class, not only text ones"
    )
    p.add_argument(
        "--group", action="append", choices=GROUPS, help="only this group (repeatable; --all)"
    )
    p.add_argument("--json", action="store_true", help="print a machine-readable report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinykit.model.coverage import all_model_types, sweep, text_model_types

    if args.all or args.group:
        table = all_model_types()
        groups = {t: g for t, (g, _) in table.items()}
        classes = {t: c for t, (_, c) in table.items() if c}
    else:
        groups, classes = dict.fromkeys(text_model_types(), "text"), {}
    wanted = args.model_types or [t for t, g in groups.items() if g in (args.group or GROUPS)]
    rows = []
    for row in sweep(wanted, classes):
        rows.append(row)
        if not args.json:  # stream: a full sweep takes minutes
            print(
                f"{'PASS' if row.ok else 'FAIL'} {groups.get(row.model_type, '?'):10s} "
                f"{row.model_type:32s} {row.weight_bytes:>10,} B {row.seconds:6.2f}s"
                + ("" if row.ok else f"  {'[upstream] ' if row.upstream else ''}{row.reason}"),
                flush=True,
            )
    per_group = {}
    for group in GROUPS:
        mine = [r for r in rows if groups.get(r.model_type) == group]
        if mine:
            per_group[group] = _summary(mine)
    summary = {
        **_summary(rows),
        "groups": per_group,
        "rows": [{**dataclasses.asdict(r), "group": groups.get(r.model_type)} for r in rows],
    }
    lines = [
        f"{group}: {s['passed']}/{s['total']} pass ({100 * s['rate']:.1f}%); "
        f"{s['passed']}/{s['buildable']} ({100 * s['rate_buildable']:.1f}%) of the types whose "
        f"own default transformers builds; median {s['median_seconds']:.2f} s per type"
        + (
            f" (not buildable upstream: {', '.join(s['upstream_broken'])})"
            if s["upstream_broken"]
            else ""
        )
        for group, s in [*per_group.items(), ("all", summary)]
    ]
    emit(summary, args.json, "\n".join(lines))
    return 0


def _summary(rows: list) -> dict:
    passed = sum(r.ok for r in rows)
    upstream = [r.model_type for r in rows if r.upstream]
    buildable = len(rows) - len(upstream)
    return {
        "passed": passed,
        "total": len(rows),
        "rate": round(passed / max(1, len(rows)), 4),
        "upstream_broken": upstream,
        "buildable": buildable,
        "rate_buildable": round(passed / max(1, buildable), 4),
        "median_seconds": round(statistics.median([r.seconds for r in rows]), 3) if rows else 0.0,
        "seconds": round(sum(r.seconds for r in rows), 1),
    }
