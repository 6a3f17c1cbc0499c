"""`tinykit cache ls|clear`: list or delete the cached tiny artifacts (tinykit.artifacts.cache)."""

from __future__ import annotations

import argparse
import dataclasses
import time

from tinykit.cli import emit


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("cache", help="list or clear cached tiny artifacts")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, helptext in (("ls", "list cached artifacts"), ("clear", "delete cached artifacts")):
        p = actions.add_parser(name, help=helptext)
        p.add_argument(
            "--cache-dir",
            default=None,
            help="cache root (default: TINYKIT_CACHE, else ~/.cache/tinykit)",
        )
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=run_ls if name == "ls" else run_clear)
    actions.choices["clear"].add_argument(
        "keys", nargs="*", metavar="KEY", help="delete only keys starting with these prefixes"
    )


def run_ls(args: argparse.Namespace) -> int:
    from tinykit.artifacts import cache  # on use: it would slow every parse

    entries = cache.ls(args.cache_dir)
    root = cache.Cache(args.cache_dir).root
    lines = [f"{len(entries)} artifact(s) in {root}"]
    for e in entries:
        built = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.built_at))
        lines.append(f"{e.key[:12]}  {e.kind:<9} {e.size_bytes / 1e6:8.2f} MB  {built}  {e.source}")
        if e.problems:  # rebuilt on its next use; `cache clear KEY` removes it now
            lines.append(f"{'':12}  CORRUPT: {'; '.join(e.problems)}")
    emit([dataclasses.asdict(e) for e in entries], args.json, "\n".join(lines))
    return 0


def run_clear(args: argparse.Namespace) -> int:
    from tinykit.artifacts import cache  # on use: it would slow every parse

    removed = cache.clear(args.cache_dir, args.keys or None)
    root = cache.Cache(args.cache_dir).root
    text = f"removed {removed} artifact(s) from {root}"
    emit({"removed": removed, "root": str(root)}, args.json, text)
    return 0
