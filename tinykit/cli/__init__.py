"""The `tinykit` command: a thin adapter that parses, calls one API function, and renders.

Each command lives in its own module of this package (found automatically; `_*.py` are
private) and defines `register(subparsers)`, which adds its parser and sets `func=<run>`.
Errors are rendered here, and only here: a `TinykitError` becomes one line on stderr and its
exit code; any other exception is a tinykit bug and exits 70, so that no crash can pass for
"a check failed" (exit 1). `--debug` or TINYKIT_DEBUG=1 adds the traceback.
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
from tinykit._procs import TIMED_OUT, Terminated, stop_on_sigterm
from tinykit.cli._args import OneLineParser
from tinykit.errors import SetupError, TinykitError


def command_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


# Exit codes: the TinykitError classes carry theirs; these two belong to the CLI alone.
EXIT_BUG = 70  # EX_SOFTWARE of sysexits.h: an internal error, not a verdict on the input
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM

EXIT_CODES = f"""exit codes:
  0    success
  1    a check failed (verify, check-determinism, dist-check, launch, fixtures verify, dumps diff)
  2    usage error: a bad argument, option or input
  3    setup error: network, Hub, packages or hardware not as needed
  {EXIT_BUG}   a tinykit bug: please report it (rerun with --debug for the traceback)
  {TIMED_OUT}  mem run: the command ran past --timeout and was stopped
  128+N mem run: the command was killed by signal N (137: SIGKILL, 139: SIGSEGV)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)
  {EXIT_TERMINATED}  terminated (SIGTERM)"""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (``only``, a command module) just that command's: a usage error
    of one command then answers without importing the other commands' modules."""
    parser = OneLineParser(  # its subparsers are OneLineParsers too
        prog="tinykit",
        description="Tiny random Hub models, tokenizers and datasets for fast, reproducible ML tests.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tinykit {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="print the traceback of any error (same as TINYKIT_DEBUG=1)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in [only] if only else command_modules():
        importlib.import_module(f"tinykit.cli.{name}").register(sub)
    return parser


def emit(result: object, as_json: bool, text: str) -> None:
    """Print a command's result: JSON for programs, `text` for people."""
    print(json.dumps(result, indent=2, sort_keys=True, default=str) if as_json else text)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse; an unknown flag is reported by its subcommand's parser, with its usage and the
    nearest flag it has (argparse would show the top-level usage)."""
    from tinykit._suggest import hint

    words = sys.argv[1:] if argv is None else argv
    first = next((w for w in words if not w.startswith("-")), "").replace("-", "_")
    only = first if first in command_modules() and "-h" not in words else None
    parser = build_parser(only)
    commands = [m.replace("_", "-") for m in command_modules()]
    if first and not only and first.replace("_", "-") not in commands:
        parser.error(
            f"unknown command {first!r}.{hint(first, commands)} Commands: {', '.join(commands)}."
        )
    args, extra = parser.parse_known_args(words)
    if extra:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        command = sub.choices[args.command]
        # an action of a command (`mem project`, `bisect versions`): its own parser and flags
        while action := next(
            (a for a in command._actions if isinstance(a, argparse._SubParsersAction)), None
        ):
            if getattr(args, action.dest, None) not in action.choices:
                break
            command = action.choices[getattr(args, action.dest)]
        flags = [o for a in command._actions for o in a.option_strings if o.startswith("--")]
        unknown = next((e for e in extra if e.startswith("-")), extra[0])
        command.error(
            f"unrecognized arguments: {' '.join(extra)}.{hint(unknown.split('=')[0], flags)}"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # read before parsing, so that a command module failing to import is covered too
    debug = "--debug" in argv or bool(os.environ.get("TINYKIT_DEBUG"))
    try:
        # taken anywhere, as the error hints ask for it: after the command's own options too
        args = parse(["--debug", *(a for a in argv if a != "--debug")] if debug else argv)
        from tinykit._progress import to_stderr

        to_stderr()  # stage lines of long commands on stderr; the result stays alone on stdout
        with stop_on_sigterm():  # SIGTERM cleans up as Ctrl-C does: temp folders, servers
            return int(args.func(args) or 0)
    except TinykitError as e:
        if debug:
            traceback.print_exc()
        print(f"tinykit: error: {type(e).__name__}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:  # 128 + the signal number
        return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
    except Exception as e:  # anything else escaped the API: a bug, never "a check failed"
        if debug:
            traceback.print_exc()
        if isinstance(e, ModuleNotFoundError) and (e.name or "tinykit").split(".")[0] != "tinykit":
            # a package this environment lacks: a setup problem, not a bug
            print(f"tinykit: error: SetupError: {missing_package(e.name or '')}", file=sys.stderr)
            return SetupError.exit_code
        print(f"tinykit: error: {bug_message(e)}", file=sys.stderr)
        return EXIT_BUG


def missing_package(module: str) -> str:
    """What to do when an import of `module` fails: install the package that provides it."""
    top = module.split(".")[0]
    return (
        f"the module {top!r} is not installed in this Python ({sys.executable}), and this "
        "command needs it: install tinykit with its dependencies (pip install tinykit, or "
        "pip install -e . in a checkout), or run the tinykit of the environment that has them"
    )


def bug_message(e: BaseException) -> str:
    """One line for an unexpected exception: what it was, and how to get the traceback."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return (
        f"this is a tinykit bug, please report it: {type(e).__name__}: {first} "
        "(rerun with --debug or TINYKIT_DEBUG=1 for the traceback)"
    )


if __name__ == "__main__":
    sys.exit(main())
