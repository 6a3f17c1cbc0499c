"""50 concurrent clients against `tinykit hub serve`: this tree's server and the one before the
hardening (git 766276e), side by side under the same load, in one run.

    python benchmarks/hub_load.py [--clients 50] [--rounds 20] [--baseline 766276e]

Each server is a real `python -m tinykit hub serve` subprocess; the old one runs from
`git archive <baseline>` unpacked into a temp folder (PYTHONPATH points at it). Every client
is a thread that waits at a barrier, then runs a bounded loop of `--rounds` requests, each on a
new connection (the churn that overflows a short listen backlog): 4 reads (model info, tree
listing, a config download, a 1 MiB weight download through the CDN redirect) for every commit
(a new file into one of 5 repos shared by 10 clients each). Reported: requests, errors (any
answer but 2xx/302, or an exception), resets (connection reset/refused/dropped unanswered),
lost writes (committed files missing afterwards), p50/p95/max latency and wall time.
Goal (issue #12): no errors, no resets, nothing lost under 50 clients.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_REPOS = 5
WEIGHTS = os.urandom(1 << 20)
RESETS = (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine)


def make_tree(root: Path) -> None:
    for i in range(SHARED_REPOS):
        repo = root / "load" / f"repo{i}"
        repo.mkdir(parents=True)
        (repo / "config.json").write_text(json.dumps({"model_type": "llama", "i": i}))
        (repo / "model.safetensors").write_bytes(WEIGHTS)


def start(code: Path, tree: Path) -> tuple[subprocess.Popen, int, str | None]:
    env = dict(os.environ, PYTHONPATH=str(code))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tinykit", "hub", "serve", str(tree), "--json", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=code,
    )
    lines: list[str] = []
    while not lines or lines[-1] != "}\n":
        line = proc.stdout.readline()
        if not line:
            sys.exit(f"server from {code} did not start: {proc.stderr.read()}")
        lines.append(line)
    info = json.loads("".join(lines))
    return proc, int(info["endpoint"].rsplit(":", 1)[1]), info["env"].get("HF_TOKEN")


class Client(threading.Thread):
    def __init__(self, n: int, port: int, token: str | None, rounds: int, barrier) -> None:
        super().__init__(daemon=True)
        self.n, self.port, self.rounds, self.barrier = n, port, rounds, barrier
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}
        self.repo = f"load/repo{n % SHARED_REPOS}"
        self.latencies: list[float] = []
        self.by_kind: dict[str, list[float]] = {}
        self.errors = self.resets = 0
        self.kinds: dict[str, int] = {}
        self.committed: list[str] = []

    def request(self, method: str, path: str, body: bytes = b"", follow: bool = False) -> None:
        start = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            conn.request(method, path, body=body, headers=self.auth)
            r = conn.getresponse()
            r.read()
            conn.close()
            if r.status == 302 and follow:  # the weight bytes come from the second origin
                host, _, rest = r.headers["Location"].removeprefix("http://").partition("/")
                conn = http.client.HTTPConnection(host, timeout=60)
                conn.request("GET", "/" + rest)
                r = conn.getresponse()
                ok = len(r.read()) == len(WEIGHTS)
                conn.close()
            else:
                ok = True
            if not (200 <= r.status < 300 or r.status == 302) or not ok:
                self.fail(f"{method} {r.status}")
                return
        except RESETS as e:
            self.resets += 1
            self.kinds[type(e).__name__] = self.kinds.get(type(e).__name__, 0) + 1
            return
        except Exception as e:  # a timeout, a malformed answer
            self.fail(type(e).__name__)
            return
        self.latencies.append(time.perf_counter() - start)
        kind = "commit" if path.endswith("/commit/main") else path.split("/")[-1].split("?")[0]
        self.by_kind.setdefault(kind, []).append(self.latencies[-1])

    def fail(self, kind: str) -> None:
        self.errors += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def commit(self, step: int) -> None:
        name = f"clients/{self.n}/step{step}.txt"
        lines = [
            {"key": "header", "value": {"summary": f"client {self.n} step {step}"}},
            {"key": "file", "value": {"path": name, "content": base64.b64encode(b"x").decode()}},
        ]
        before = self.errors + self.resets
        self.request("POST", f"/api/models/{self.repo}/commit/main", _ndjson(lines))
        if self.errors + self.resets == before:
            self.committed.append(f"{self.repo}/{name}")

    def run(self) -> None:
        self.barrier.wait()
        reads = [
            ("GET", f"/api/models/{self.repo}", False),
            ("GET", f"/api/models/{self.repo}/tree/main?recursive=true", False),
            ("GET", f"/{self.repo}/resolve/main/config.json", False),
            ("GET", f"/{self.repo}/resolve/main/model.safetensors", True),
        ]
        for step in range(self.rounds):
            if step % 5 == 4:
                self.commit(step)
            else:
                method, path, follow = reads[(step + self.n) % len(reads)]
                self.request(method, path, follow=follow)


def _ndjson(lines: list[dict]) -> bytes:
    return "\n".join(json.dumps(line) for line in lines).encode()


def load(code: Path, clients: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="tinykit-hub-load-") as tmp:
        tree = Path(tmp) / "tree"
        make_tree(tree)
        proc, port, token = start(code, tree)
        try:
            barrier = threading.Barrier(clients)
            threads = [Client(n, port, token, rounds, barrier) for n in range(clients)]
            started = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=600)
            wall = time.perf_counter() - started
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
        latencies = sorted(x for t in threads for x in t.latencies)
        committed = [p for t in threads for p in t.committed]
        lost = sum(not (tree / p).is_file() for p in committed)
        return {
            "requests": clients * rounds,
            "errors": sum(t.errors for t in threads),
            "resets": sum(t.resets for t in threads),
            "commits": len(committed),
            "lost": lost,
            "p50": statistics.median(latencies) if latencies else float("nan"),
            "p95": latencies[int(0.95 * (len(latencies) - 1))] if latencies else float("nan"),
            "max": latencies[-1] if latencies else float("nan"),
            "wall": wall,
            "tracebacks": err.count("Traceback"),
            "p50_by_kind": {
                k: round(
                    1e3 * statistics.median([x for t in threads for x in t.by_kind.get(k, [])])
                )
                for k in sorted({k for t in threads for k in t.by_kind})
            },
            "kinds": {k: sum(t.kinds.get(k, 0) for t in threads) for t in threads for k in t.kinds},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20, help="requests per client")
    parser.add_argument("--baseline", default="766276e", help="git commit of the old server")
    parser.add_argument("--only-new", action="store_true", help="skip the old server")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tinykit-hub-old-") as old:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.baseline, "tinykit"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", old], input=archive, check=True)
        results = {}
        if not args.only_new:
            results[f"before ({args.baseline})"] = load(Path(old), args.clients, args.rounds)
        results["after (this tree)"] = load(REPO, args.clients, args.rounds)
    print(f"{args.clients} clients x {args.rounds} requests, 1 commit per 4 reads, new connections")
    header = "server", "requests", "errors", "resets", "commits", "lost", "p50 ms", "p95 ms"
    print(
        f"{header[0]:<20}"
        + "".join(f"{h:>9}" for h in header[1:])
        + "   max ms   wall s  tracebacks"
    )
    for name, r in results.items():
        counts = "".join(f"{r[k]:>9}" for k in ("requests", "errors", "resets", "commits", "lost"))
        times = f"{r['p50'] * 1e3:>9.0f}{r['p95'] * 1e3:>9.0f}{r['max'] * 1e3:>9.0f}"
        print(f"{name:<20}{counts}{times}{r['wall']:>9.1f}{r['tracebacks']:>12}")
    for name, r in results.items():
        print(
            f"{name}: failures by kind: {r['kinds'] or 'none'}; p50 ms by request: {r['p50_by_kind']}"
        )


if __name__ == "__main__":
    main()
