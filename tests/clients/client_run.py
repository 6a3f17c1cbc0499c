"""Helpers of the real-client runs (tests/clients/*.sh): the network audit, and the verdict.

    python tests/clients/client_run.py audit-hook DIR        # DIR/sitecustomize.py
    python tests/clients/client_run.py check --junit J --server-log L --audit-log A \\
        --hub HUBDIR --known KNOWN_FAILURES --rootdir SUITE

The audit hook goes into every Python process of the run through PYTHONPATH: each
`socket.connect` to an address that is not loopback (or a Unix socket) is appended to
$TINYKIT_AUDIT_LOG. The verdict passes when no such connection was made, the Hub log holds no
server error and no request for a repo that was not served, and every failed test is in the
known-failures file (one `test id  # reason` per line). It prints the counts either way.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

HOOK = '''"""tinykit client-run audit: record every non-loopback socket.connect (see client_run.py)."""
import os
import sys

_LOG = os.environ.get("TINYKIT_AUDIT_LOG")
_LOOPBACK = ("127.", "::1", "localhost")


def _audit(event, args):
    if event != "socket.connect" or not _LOG:
        return
    address = args[1]
    if not isinstance(address, tuple):  # a Unix socket path: local by definition
        return
    host = str(address[0])
    if host.startswith(_LOOPBACK) or host == "::ffff:127.0.0.1":
        return
    with open(_LOG, "a") as f:
        f.write(f"{os.getpid()} connect {address!r} {' '.join(sys.argv)[:200]}\\n")


sys.addaudithook(_audit)
'''

# `tinykit hub serve` prints one `METHOD STATUS PATH` line per request on stderr
_REQUEST = re.compile(r"^(GET|HEAD|POST|PUT|DELETE) (\d{3}) (\S+)$")
_REPO_PATHS = (
    re.compile(r"^/api/(models|datasets)/([^/?]+)/([^/?]+)"),
    re.compile(r"^/(datasets)/([^/?]+)/([^/?]+)/resolve/"),
    re.compile(r"^/()([^/?]+)/([^/?]+)/resolve/"),
)


def pytest_collection_modifyitems(config, items) -> None:
    """As a pytest plugin (`-p client_run`): keep the ids containing $CLIENT_RUN_KEEP, and those
    listed in the file $CLIENT_RUN_IDS; deselect the rest (one collection for both)."""
    import os

    keep = os.environ.get("CLIENT_RUN_KEEP", "")
    listed = os.environ.get("CLIENT_RUN_IDS")
    ids = set(Path(listed).read_text().split()) if listed and Path(listed).is_file() else set()
    chosen = [(keep and keep in i.nodeid) or i.nodeid in ids for i in items]
    config.hook.pytest_deselected(items=[i for i, c in zip(items, chosen, strict=True) if not c])
    items[:] = [i for i, c in zip(items, chosen, strict=True) if c]


def write_hook(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(HOOK)


def served_repos(hub: Path) -> set[tuple[str, str]]:
    repos = {
        ("model", f"{o.name}/{n.name}".lower())
        for o in hub.iterdir()
        for n in o.iterdir()
        if o.is_dir() and n.is_dir() and o.name not in ("datasets", "_revisions")
    }
    data = hub / "datasets"
    if data.is_dir():
        repos |= {
            ("dataset", f"{o.name}/{n.name}".lower()) for o in data.iterdir() for n in o.iterdir()
        }
    return repos  # fmt: skip


def hub_errors(server_log: Path, hub: Path) -> tuple[list[str], set[tuple[str, str]]]:
    """Server errors and requests for unserved repos; and every repo that was asked for."""
    served, errors, asked = served_repos(hub), [], set()
    for line in server_log.read_text(errors="replace").splitlines():
        m = _REQUEST.match(line.strip())
        if not m:
            continue
        status, path = int(m.group(2)), m.group(3)
        if status >= 500:
            errors.append(line.strip())
        for pattern in _REPO_PATHS:
            if repo := pattern.match(path):
                kind = "dataset" if repo.group(1) == "datasets" else "model"
                key = (kind, f"{repo.group(2)}/{repo.group(3)}".lower())
                asked.add(key)
                if key not in served:
                    errors.append(f"{line.strip()}  (repo not served)")
                break
    return errors, asked


def node_id(classname: str, name: str, rootdir: Path) -> str:
    """pytest's node id of a junit testcase: the longest dotted prefix of `classname` that is a
    module file under `rootdir`, then its classes (a top-level test function has none)."""
    parts = classname.split(".")
    cut = next(
        (k for k in range(len(parts), 0, -1) if (rootdir / "/".join(parts[:k])).with_suffix(".py").is_file()),
        max(len(parts) - 1, 1),
    )  # fmt: skip
    return "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], name])


def junit_results(junit: Path, rootdir: Path = Path()) -> tuple[dict[str, int], list[str]]:
    counts = {"collected": 0, "passed": 0, "skipped": 0, "failed": 0}
    failed = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        counts["collected"] += 1
        outcome = {child.tag for child in case}
        if outcome & {"failure", "error"}:
            counts["failed"] += 1
            failed.append(node_id(case.get("classname", ""), case.get("name", ""), rootdir))
        elif "skipped" in outcome:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts, failed


def known_failures(path: Path) -> dict[str, str]:
    known = {}
    for line in path.read_text().splitlines():
        test_id, _, reason = line.partition("#")
        if test_id.strip():
            if not reason.strip():
                raise SystemExit(f"{path}: {test_id.strip()} has no reason. Add '# why'.")
            known[test_id.strip()] = reason.strip()
    return known


def check(args: argparse.Namespace) -> int:
    counts, failed = junit_results(args.junit, args.rootdir)
    errors, asked = hub_errors(args.server_log, args.hub)
    audit = args.audit_log.read_text().splitlines() if args.audit_log.exists() else []
    known = known_failures(args.known)
    unexpected = [t for t in failed if t not in known]
    print(
        "client run: {collected} collected, {passed} passed, {skipped} skipped, {failed} failed".format(
            **counts
        )
    )
    print(f"client run: {len(asked)} repo(s) asked of the Hub, {len(errors)} Hub error(s), "
          f"{len(audit)} non-loopback connection(s)")  # fmt: skip
    for test_id in failed:
        print(f"  {'known' if test_id in known else 'NEW'} failure: {test_id}"
              + (f"  # {known[test_id]}" if test_id in known else ""))  # fmt: skip
    for line in errors[:20] + audit[:20]:
        print(f"  {line}")
    if args.repos_out:
        args.repos_out.write_text("".join(f"{t} {r}\n" for t, r in sorted(asked)))
    ok = not unexpected and not errors and not audit and counts["collected"] > 0
    print(f"client run: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    hook = sub.add_parser("audit-hook")
    hook.add_argument("folder", type=Path)
    c = sub.add_parser("check")
    for name in ("junit", "server-log", "audit-log", "hub", "known"):
        c.add_argument(f"--{name}", type=Path, required=True)
    c.add_argument("--repos-out", type=Path, help="write the repos asked for here")
    c.add_argument("--rootdir", type=Path, default=Path(), help="the suite's pytest rootdir")
    args = parser.parse_args(argv)
    if args.action == "audit-hook":
        write_hook(args.folder)
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
