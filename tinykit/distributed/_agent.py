"""One emulated node: torchrun's own agent (`torch.distributed.run.main`) with a lifeline.

    python -m tinykit.distributed._agent TORCHRUN-ARGS

torchrun starts every worker in a session of its own, so when the launcher is killed nothing
would stop them. Here a thread waits on stdin (the launcher's pipe); at EOF it kills every
descendant and the agent. The agent also adopts orphans of its workers (a child subreaper), so
a killed rank's children stay in the tree the launcher kills. Private: `torchrun.py` starts it.
"""

from __future__ import annotations

import sys
import threading

from tinykit.distributed.processes import become_subreaper, die_with_parent, no_core_dumps


def main(argv: list[str]) -> None:
    become_subreaper()
    no_core_dumps()  # the launcher asks hung workers for their stacks with SIGABRT
    lifeline = threading.Thread(
        target=die_with_parent, args=("tree",), name="tinykit-lifeline", daemon=True
    )
    lifeline.start()
    from torch.distributed.run import main as torchrun

    torchrun(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
