"""Free TCP ports that concurrent test processes (xdist workers, parallel sessions) do not share.

The usual trick, `10999 + xdist worker id`, collides as soon as two sessions run at once and never
checks that the port is really free. Here each xdist worker owns a disjoint slice of a range below
the kernel's ephemeral range (so port-0 binds by other programs never land in it), starts at a
per-process offset inside its slice, and probes every candidate with a real `bind`.
"""

from __future__ import annotations

import itertools
import os
import socket
from typing import Any

from tinykit.errors import SetupError

# Below Linux's default ephemeral range (32768-60999): the kernel never hands these out for port 0.
RANGE_START = 20000
RANGE_END = 32000
SLICE = 500  # ports per xdist worker: 24 workers fit in the range

_counter = itertools.count()


def xdist_worker_index() -> int:
    """0 for `gw0` or a plain run, N for `gwN` (pytest-xdist sets PYTEST_XDIST_WORKER)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = worker.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when `host:port` can be bound now (no SO_REUSEADDR: TIME_WAIT counts as taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port on `host` that is free now, from this xdist worker's own slice of ports.

    Successive calls in one process walk the slice, so two launches in a row never get the same port
    even if the first has not bound it yet.

    Raises:
        SetupError: every port of the slice is taken.
    """
    n_slices = (RANGE_END - RANGE_START) // SLICE
    base = RANGE_START + (xdist_worker_index() % n_slices) * SLICE
    start = os.getpid() % SLICE  # two parallel sessions without xdist start at different places
    for _ in range(SLICE):
        port = base + (start + next(_counter)) % SLICE
        if port_is_free(port, host):
            return port
    raise SetupError(
        f"No free port on {host} in {base}-{base + SLICE - 1} (the slice of xdist worker "
        f"{xdist_worker_index()}). All {SLICE} ports are bound by other processes. "
        "Stop stale launchers (`ss -ltnp` shows who holds them) or run with fewer xdist workers."
    )


def loopback_store(world_size: int | None = None) -> Any:
    """A `torch.distributed.TCPStore` server that listens on 127.0.0.1 only, on an OS-chosen port.

    Given a host, TCPStore still binds every interface; handed a socket already bound to the
    loopback address (`master_listen_fd`) it listens there, and it starts in ~2 ms instead of the
    ~200 ms of a port-0 TCPStore (torch 2.13 on Linux). Clients: `TCPStore("127.0.0.1", port)`.
    """
    from torch.distributed import TCPStore

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1024)
        port = sock.getsockname()[1]
    except OSError:
        sock.close()
        raise
    # the store owns the socket from here on (detach: Python must not close it under it)
    return TCPStore(
        "127.0.0.1",
        port,
        world_size,
        is_master=True,
        wait_for_workers=False,
        multi_tenant=True,
        master_listen_fd=sock.detach(),
    )
