"""One `git bisect run` step: install the checkout, check the import, run the predicate.

Run as `python -m tinykit.bisect.commit_step STATE.json` by `tinykit.bisect.commits`, inside the
private venv, in the checkout. Exit 0 good, 1 bad, 125 skip, 255 abort (see commits.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tinykit._procs import Terminated, run_command, stop_on_sigterm
from tinykit.bisect.steps import BAD, GOOD, SKIP, TIMEOUT, command_text, run_once

CODES = {GOOD: 0, BAD: 1, SKIP: 125, TIMEOUT: 125}
ABORT = 255


def _record(state: dict, **entry: object) -> None:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    subject = subprocess.run(["git", "log", "-1", "--format=%s"], capture_output=True, text=True)
    entry = {"commit": commit.strip(), "subject": subject.stdout.strip(), **entry}
    with open(state["log"], "a") as f:
        f.write(json.dumps(entry) + "\n")


def step(state: dict) -> int:
    start = time.perf_counter()
    env = dict(os.environ)
    env["VIRTUAL_ENV"] = state["venv"]
    env["PATH"] = os.pathsep.join([str(Path(state["venv"]) / "bin"), env.get("PATH", "")])
    checkout = Path(state["checkout"]).resolve()
    done_note = ""
    if state["install"]:
        done = run_command(state["install"], shell=True, env=env, capture=True)
        if done.returncode != 0:
            last = ([ln for ln in done.output.splitlines() if ln.strip()] or [""])[-1]
            _record(
                state,
                outcome=SKIP,
                exit_code=done.returncode,
                seconds=time.perf_counter() - start,
                tail=done.output[-2000:],
                note=f"install failed: {last.strip()[:200]}",
            )
            return CODES[SKIP]
    if state["package"]:  # the code that runs must be the code being bisected
        probe = subprocess.run(
            [sys.executable, "-c", f"import {state['package']} as m; print(m.__file__)"],
            env=env,
            capture_output=True,
            text=True,
        )
        if probe.returncode != 0:
            _record(
                state,
                outcome=SKIP,
                exit_code=probe.returncode,
                seconds=time.perf_counter() - start,
                tail=probe.stderr[-2000:],
                note=f"import {state['package']} failed",
            )
            return CODES[SKIP]
        where = Path(probe.stdout.strip()).resolve()
        if checkout not in where.parents:
            _record(
                state,
                outcome="abort",
                exit_code=None,
                seconds=time.perf_counter() - start,
                tail="",
                note=f"{state['package']} imports from {where}, not from the checkout {checkout}; "
                "fix --install (an editable install) or --package",
            )
            return ABORT
        done_note = f"{state['package']} from {where.relative_to(checkout)}"
    run = run_once(state["cmd"], env, timeout=state["timeout"], skip_on=state["skip_on"])
    _record(
        state,
        outcome=run.outcome,
        exit_code=run.exit_code,
        seconds=time.perf_counter() - start,
        tail=run.tail,
        note=done_note,
        command=command_text(state["cmd"]),
    )
    return CODES[run.outcome]


def main() -> int:
    try:
        with stop_on_sigterm():  # SIGTERM, as Ctrl-C, ends the predicate's process group too
            return step(json.loads(Path(sys.argv[1]).read_text()))
    except KeyboardInterrupt as e:  # the bisect is being stopped: no traceback, no verdict
        return 128 + (signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
    except Exception as e:  # tinykit's own failure: abort the bisect, never blame the commit
        print(f"tinykit bisect step failed: {type(e).__name__}: {e}", file=sys.stderr)
        return ABORT


if __name__ == "__main__":
    sys.exit(main())
