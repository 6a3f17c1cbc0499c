"""The `tinykit` command: a thin adapter that parses, calls one API function, and renders.

Each command lives in its own module of this package (found automatically; `_*.py` are
private) and defines `register(subparsers)`, which adds its parser and sets `func=<run>`. Errors are rendered here, and only here:
a `TinykitError` becomes one line on stderr and its exit code; TINYKIT_DEBUG=1 adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
import traceback

from tinykit import __version__
from tinykit.cli._args import OneLineParser
from tinykit.cli._signals import Terminated, stop_on_sigterm
from tinykit.errors import TinykitError


def command_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(  # its subparsers are OneLineParsers too
        prog="tinykit",
        description="Tiny random Hub models, tokenizers and datasets for fast, reproducible ML tests.",
    )
    parser.add_argument("--version", action="version", version=f"tinykit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in command_modules():
        importlib.import_module(f"tinykit.cli.{name}").register(sub)
    return parser


def emit(result: object, as_json: bool, text: str) -> None:
    """Print a command's result: JSON for programs, `text` for people."""
    print(json.dumps(result, indent=2, sort_keys=True, default=str) if as_json else text)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with stop_on_sigterm():  # SIGTERM cleans up as Ctrl-C does: temp folders, servers
            return int(args.func(args) or 0)
    except TinykitError as e:
        if os.environ.get("TINYKIT_DEBUG"):
            traceback.print_exc()
        print(f"tinykit: error: {type(e).__name__}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        return 143 if isinstance(e, Terminated) else 130  # 128 + the signal number


if __name__ == "__main__":
    sys.exit(main())
