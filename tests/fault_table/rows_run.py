"""Rows of the fault table: commands that run a user's code: check-determinism, dist-check, launch, mem, bisect, matrix."""

from __future__ import annotations

from fault_table.table import Row, row

ROWS: dict[str, dict[str, Row]] = {
    "check-determinism": {
        "no colon": row("check-determinism justaname", 2, "justaname"),
        "missing module": row(
            "check-determinism no_such_module_xyz:f --mode inprocess", 2, "no_such"
        ),
        "missing function": row("check-determinism {in}/fns.py:nope --mode inprocess", 2, "nope"),
        "not callable": row("check-determinism {in}/fns.py:number --mode inprocess", 2, "int"),
        "function raises": row("check-determinism {in}/fns.py:raises --mode inprocess", 2, "boom"),
        "function hangs": row("check-determinism {in}/fns.py:hangs --timeout 1", 1, "timeout"),
        "runs one": row("check-determinism {in}/fns.py:raises --runs 1", 2, "--runs"),
        "runs not a number": row("check-determinism {in}/fns.py:raises --runs x", 2, "--runs"),
        "timeout zero": row("check-determinism {in}/fns.py:raises --timeout 0", 2, "--timeout"),
        "timeout negative": row(
            "check-determinism {in}/fns.py:raises --timeout -1", 2, "--timeout"
        ),
        "timeout nan": row("check-determinism {in}/fns.py:raises --timeout nan", 2, "--timeout"),
        "atol negative": row("check-determinism {in}/fns.py:raises --atol -1", 2, "atol"),
        "mode unknown": row("check-determinism {in}/fns.py:raises --mode threads", 2, "--mode"),
        "function hangs, inprocess": row(
            "check-determinism {in}/fns.py:hangs --mode inprocess --timeout 1", 1, "timeout"
        ),
        "seed not a number": row("check-determinism {in}/fns.py:raises --seed x", 2, "--seed"),
        "deterministic, json: missing function": row(
            "check-determinism {in}/fns.py:nope --mode inprocess --deterministic --json", 2, "nope"
        ),
    },
    "dist-check": {
        "timeout negative": row("dist-check --timeout -1", 2, "--timeout"),
        "timeout zero": row("dist-check --timeout 0", 2, "--timeout"),
        "timeout inf": row("dist-check --timeout inf", 2, "--timeout"),
        "timeout not a number": row("dist-check --timeout soon", 2, "--timeout"),
        "nproc zero": row("dist-check --nproc 0", 2, "--nproc"),
        "nproc huge": row("dist-check --nproc 100000", 2, "--nproc"),
        "backend unknown": row("dist-check --backend mpi", 2, "--backend"),
        "nodes zero": row("dist-check --nodes 0 --json", 2, "--nodes"),
    },
    "launch": {
        "no command": row("launch", 2, "no program"),
        "nodes zero": row("launch --nodes 0 -- true", 2, "--nodes"),
        "nproc-per-node not a number": row(
            "launch --nproc-per-node x -- true", 2, "--nproc-per-node"
        ),
        "max-restarts negative": row("launch --max-restarts -1 -- true", 2, "--max-restarts"),
        "timeout zero": row("launch --timeout 0 -- true", 2, "--timeout"),
        "fail not rank=R,at=STEP": row("launch --fail soon -- true", 2, "--fail"),
        "workdir a file": row("launch --workdir {in}/a-file -- true", 2, "is a file"),
    },
    "mem": {
        "no action": row("mem", 2, "required"),
        "no command": row("mem run", 2, "no command to measure"),
        "command not found": row("mem run -- no-such-command-x", 2, "not found on PATH"),
        "plot not a png": row("mem run --plot {out}/m.svg -- true", 2, "*.png"),
        "plot folder missing": row("mem run --plot {out}/no/m.png -- true", 2, "does not exist"),
        "project missing folder": row("mem project {in}/nope", 2, "nope"),
        "project bad layers": row("mem project {in}/nope --layers 2,1", 2, "LO < HI"),
        "project bad seq": row("mem project {in}/nope --seq 0", 2, "--seq"),
        "interval zero": row("mem run --interval 0 -- true", 2, "interval"),
        "timeout zero": row("mem run --timeout 0 -- true", 2, "--timeout"),
        "plot over a kept file": row("mem run --plot {in}/kept.png -- true", 2, "--force"),
        "plot a folder, forced": row(
            "mem run --plot {in}/empty.png --force --json -- no-such-command-x", 2, "not found"
        ),
        "project batch zero": row("mem project {in}/nope --batch 0", 2, "--batch"),
        "project dtype unknown": row("mem project {in}/nope --dtype int8", 2, "--dtype"),
        "project optimizer unknown": row(
            "mem project {in}/nope --optimizer lion", 2, "--optimizer"
        ),
        "project train, full, json: missing folder": row(
            "mem project {in}/nope --train --full --json", 2, "nope"
        ),
    },
    "bisect versions": {
        "no action": row("bisect", 2, "required"),
        "record, same ends": row(
            "bisect versions pkg --versions 1.0,2.0,3.0 --good 1.0 --bad 1.0 --record "
            "--record-dir {out}/dumps -- true",
            2,
            "same version",
        ),
        # refused before the bisect runs, not after its minutes
        "record-dir not empty": row(
            "bisect versions pkg --versions 1.0,2.0,3.0 --good 1.0 --bad 3.0 --record "
            "--record-dir {in}/full-out -- true",
            2,
            "not empty",
        ),
        "record-dir without record": row(
            "bisect versions pkg --versions 1.0,2.0,3.0 --good 1.0 --bad 3.0 "
            "--record-dir {out}/dumps -- true",
            2,
            "without --record",
        ),
        "good not a version": row(
            "bisect versions pkg --versions 1.0,2.0,3.0 --good x!y --bad 3.0 -- true",
            2,
            "not a version",
        ),
        "bad missing": row(
            "bisect versions pkg --versions 1.0,2.0,3.0 --good 1.0 -- true", 2, "--bad is required"
        ),
        "versions not versions": row(
            "bisect versions pkg --versions a,b --good 1.0 --bad 3.0 -- true", 2, "PEP 440"
        ),
        "good after bad": row(
            "bisect versions pkg --versions 1.0,2.0,3.0 --good 3.0 --bad 1.0 -- true", 2, "newer"
        ),
        "same ends": row(
            "bisect versions pkg --versions 1.0,2.0,3.0 --good 1.0 --bad 1.0 -- true",
            2,
            "same version",
        ),
        "no command": row(
            "bisect versions pkg --versions 1.0,2.0,3.0 --good 1.0 --bad 3.0", 2, "no command"
        ),
        "repeat zero": row(
            "bisect versions pkg --versions 1.0,2.0,3.0 --good 1.0 --bad 3.0 --repeat 0 -- true",
            2,
            "--repeat",
        ),
        "skip-on not a regex": row(
            "bisect versions pkg --versions 1.0,2.0,3.0 --good 1.0 --bad 3.0 --skip-on ( -- true",
            2,
            "--skip-on",
        ),
        "timeout negative": row(
            "bisect versions pkg --versions 1.0,2.0,3.0 --good 1.0 --bad 3.0 --timeout -1 -- true",
            2,
            "--timeout",
        ),
        "an end not a release": row(
            "bisect versions pkg --versions 1.0,2.0,3.0 --good 1.5 --bad 3.0 --pre --no-env-capture --json -- true",
            2,
            "1.5",
        ),
        "index options, terms: bad ends": row(
            "bisect versions pkg --find-links {in}/nope --index-url http://127.0.0.1:9 "
            "--cache-dir {out}/envs --term-old broken --term-new fixed --good 2 --bad 1 -- true",
            2,
            "broken end 2 is newer",
        ),
    },
    "bisect commits": {
        "no repo": row("bisect commits --good a --bad b -- true", 2, "--repo"),
        "record-dir not empty": row(
            "bisect commits --repo {in}/empty --good a --bad b --record --record-dir {in}/full-out "
            "-- true",
            2,
            "not empty",
        ),
        "record, not a clone": row(
            "bisect commits --repo {in}/empty --good a --bad b --record --record-dir {out}/d -- true",
            2,
            "not a git clone",
        ),
        "not a clone": row("bisect commits --repo {in}/empty --good a --bad b -- true", 2, "git"),
        "good not a commit": row(
            "bisect commits --repo {repo} --good nope --bad v0.2 -- true", 2, "'nope'"
        ),
        "from-versions, tag missing": row(
            "bisect commits --repo {repo} --from-versions --good 9.9 --bad 0.2 -- true", 2, "9.9"
        ),
        "same ends": row(
            "bisect commits --repo {repo} --good v0.1 --bad v0.1 --install true --package p "
            "--timeout 5 --term-old old --term-new new --json -- true",
            2,
            "same commit",
        ),
        "good after bad": row(
            "bisect commits --repo {repo} --good v0.2 --bad v0.0 -- true", 2, "ancestor"
        ),
        "timeout zero": row(
            "bisect commits --repo {repo} --good v0.0 --bad v0.2 --timeout 0 -- true",
            2,
            "--timeout",
        ),
    },
    "matrix": {
        "no versions": row("matrix pkg -- true", 2, "--versions"),
        "since not a version": row("matrix pkg --since x!y -- true", 2, "not a version"),
        "no command": row("matrix pkg --versions 1.0", 2, "no command"),
        "repeat zero": row("matrix pkg --versions 1.0 --repeat 0 -- true", 2, "--repeat"),
        "timeout zero": row("matrix pkg --versions 1.0 --timeout 0 -- true", 2, "--timeout"),
        "skip-on not a regex": row("matrix pkg --versions 1.0 --skip-on ( -- true", 2, "--skip-on"),
        "versions not versions, index options": row(
            "matrix pkg --versions a,b --find-links {in}/nope --index-url http://127.0.0.1:9 "
            "--cache-dir {out}/envs --json -- true",
            2,
            "PEP 440",
        ),
    },
    "record": {
        "no out": row("record -- true", 2, "-o DIR is required"),
        "no command": row("record -o {out}/r", 2, "no command"),
        "out not empty": row("record -o {in}/full-out -- true", 2, "not empty"),
        "steps not numbers": row("record -o {out}/r --steps x -- true", 2, "--steps"),
        "what unknown": row(
            "record -o {out}/r --what nope --modules x --tensors full -- true", 2, "unknown"
        ),
        "max-bytes zero": row("record -o {out}/r --max-bytes 0 -- true", 2, "--max-bytes"),
        "first-step negative": row("record -o {out}/r --first-step -1 -- true", 2, "--first-step"),
        "runs no model": row("record -o {out}/r --json -- true", 2, "nothing was recorded"),
        "timeout zero": row("record -o {out}/r --timeout 0 -- true", 2, "--timeout"),
    },
}
