"""`tinykit fixtures build|verify|lock [NAME ...]`: the named fixtures of fixtures/*.toml."""

from __future__ import annotations

import argparse

from tinykit.cli import emit


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("fixtures", help="build, verify or lock the named tiny fixtures")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, helptext, run in (
        ("build", "build the fixtures into the cache and print their folders", run_build),
        ("verify", "check built fixtures against fixtures/lock.json; exit 1 on drift", run_verify),
        ("lock", "rewrite fixtures/lock.json from the built fixtures", run_lock),
    ):
        p = actions.add_parser(name, help=helptext)
        p.add_argument("names", nargs="*", metavar="NAME", help="fixture names (default: all)")
        p.add_argument(
            "--fixtures-dir",
            default=None,
            help="folder holding *.toml specs and lock.json (default: tinykit's own)",
        )
        p.add_argument(
            "--cache-dir",
            default=None,
            help="artifact cache (default: TINYKIT_CACHE, else ~/.cache/tinykit)",
        )
        p.add_argument(
            "--no-rebuild",
            action="store_true",
            help="a cached fixture whose files differ from their recorded digests is an error "
            "(exit 3) instead of being rebuilt (same as TINYKIT_CACHE_REBUILD=0)",
        )
        if name != "build":
            p.add_argument(
                "--fresh",
                action="store_true",
                help="build in a throwaway cache instead of reusing cached builds",
            )
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=run)
    c = actions.add_parser(
        "compat", help="which model fixtures build, load and give the same logits per version"
    )
    c.add_argument("names", nargs="*", metavar="NAME", help="fixture names (default: all models)")
    c.add_argument("--versions", required=True, metavar="A,B,C", help="the releases to compare")
    c.add_argument("--package", default="transformers", help="the package whose versions vary")
    c.add_argument("--fixtures-dir", default=None, help="folder holding *.toml specs")
    c.add_argument("--cache-dir", default=None, help="artifact cache (default: TINYKIT_CACHE)")
    c.add_argument("--find-links", metavar="DIR", help="a local wheel folder instead of the index")
    c.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    c.set_defaults(func=run_compat)


def run_build(args: argparse.Namespace) -> int:
    from tinykit.artifacts import named as fixture_specs  # on use, not at parse time

    built = fixture_specs.build(args.names, args.fixtures_dir, _cache(args))
    emit(built, args.json, "\n".join(f"{name}  {path}" for name, path in built.items()))
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from tinykit.artifacts import named as fixture_specs  # on use, not at parse time

    report = fixture_specs.verify(args.names, args.fixtures_dir, _cache(args), args.fresh)
    changed = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in report["version_changes"].items())
    text = f"{len(report['checked'])} fixture(s) match lock.json"
    emit(report, args.json, text + (f" (versions changed: {changed})" if changed else ""))
    return 0


def run_lock(args: argparse.Namespace) -> int:
    from tinykit.artifacts import named as fixture_specs  # on use, not at parse time

    path = fixture_specs.lock(args.names, args.fixtures_dir, _cache(args), args.fresh)
    emit({"lock": str(path)}, args.json, f"wrote {path}")
    return 0


def _cache(args: argparse.Namespace):  # -> Cache, imported on use
    from tinykit.artifacts.cache import Cache

    return Cache(args.cache_dir, rebuild=False if args.no_rebuild else None)


def run_compat(args: argparse.Namespace) -> int:
    from tinykit.bisect.compat import fixtures_compat
    from tinykit.cli._args import comma_list

    result = fixtures_compat(
        comma_list(args.versions) or [],
        args.names,
        package=args.package,
        fixtures_dir=args.fixtures_dir,
        find_links=args.find_links,
        artifact_cache=args.cache_dir,
    )
    emit(result.to_dict(), args.json, result.markdown())
    return 0 if result.ok else 1
