"""Run by Python's `site` module at the start of every interpreter of a `tinykit record -- CMD`
command (this folder leads its PYTHONPATH; see `tinykit.numerics.attach`). It arms the recording,
then runs the sitecustomize it shadows, if there is one. Any failure here is one line on stderr:
the command still runs, unrecorded."""

import importlib.machinery
import importlib.util
import json
import os
import sys


def _arm() -> None:
    try:
        from tinykit.numerics.attach import start_from_environment
    except ImportError:  # a Python that does not have tinykit: the one that started the command
        sys.path.append(json.loads(os.environ["TINYKIT_RECORD"])["tinykit"])
        from tinykit.numerics.attach import start_from_environment
    start_from_environment()


def _chain() -> None:
    """Run the next sitecustomize on sys.path (a distribution's, a virtualenv's)."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if os.environ.get("TINYKIT_RECORD"):
    try:
        _arm()
    except Exception as e:  # never stop the user's program
        print(
            f"tinykit record: not recording this process: {type(e).__name__}: {e}", file=sys.stderr
        )
_chain()
