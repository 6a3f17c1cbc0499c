"""Rows of the fault table: environments, fixtures and the cache, dumps, the loopback Hub and stand-ins."""

from __future__ import annotations

from fault_table.table import FX, Row, row

ROWS: dict[str, dict[str, Row]] = {
    "env": {
        "capture parent a file": row("env capture -o {in}/a-file/env.json", 2, "a-file"),
        "capture disk full": row("env capture -o {full}/env.json", 3, "space", "full"),
        "capture read-only": row("env capture -o {ro}/env.json", 3, "read-only", "ro"),
        "diff missing": row("env diff {in}/nope.json {in}/nope2.json", 2, "nope"),
        "diff not json": row("env diff {in}/bad.json {in}/bad.json", 2, "bad.json"),
        "diff a list": row("env diff {in}/list.json {in}/list.json", 2, "list.json"),
        "no action": row("env", 2, "required"),
        "capture over a kept file": row("env capture -o {in}/kept.json", 2, "--force"),
        "capture into a folder, forced": row(
            "env capture -o {in}/empty --force --all-env", 2, "is a folder"
        ),
        "diff json, missing": row("env diff {in}/nope.json {in}/nope2.json --json", 2, "nope"),
    },
    "coverage": {
        "unknown type": row("coverage no_such_model_type", 2, "no_such_model_type"),
        "no workers": row("coverage bert --jobs 0", 2, "--jobs 0"),
        "workers not a number": row("coverage bert --jobs x", 2, "--jobs"),
        "unknown type with workers": row("coverage no_such_model_type --jobs 2", 2, "no_such"),
        "group unknown": row("coverage --all --group smell", 2, "--group"),
        "json, unknown type": row("coverage no_such_model_type --json", 2, "no_such"),
    },
    "fixtures": {
        "build dir missing": row("fixtures build --fixtures-dir {in}/nope", 2, "nope"),
        "build dir empty": row("fixtures build --fixtures-dir {in}/empty", 2, "no *.toml"),
        "verify dir empty": row("fixtures verify --fixtures-dir {in}/empty", 2, "lock"),
        "lock dir missing": row("fixtures lock --fixtures-dir {in}/nope", 2, "nope"),
        "spec not toml": row("fixtures build --fixtures-dir {in}/toml-bad", 2, "TOML"),
        "no action": row("fixtures", 2, "required"),
        # a corrupt cache entry, per file kind, with rebuilding off: named, left as it is
        "build: weights truncated": row(
            f"fixtures build {FX} --no-rebuild", 3, "cache clear", corrupt="weights truncated"
        ),
        "build: config edited": row(
            f"fixtures build {FX} --no-rebuild", 3, "cache clear", corrupt="config edited"
        ),
        "build: tokenizer missing": row(
            f"fixtures build {FX} --no-rebuild", 3, "cache clear", corrupt="tokenizer missing"
        ),
        "build: parquet truncated": row(
            f"fixtures build {FX} --no-rebuild", 3, "cache clear", corrupt="parquet truncated"
        ),
        "build: metadata unreadable": row(
            f"fixtures build {FX} --no-rebuild", 3, "metadata", corrupt="metadata unreadable"
        ),
        "verify: weights truncated": row(
            f"fixtures verify {FX} --no-rebuild", 3, "cache clear", corrupt="weights truncated"
        ),
        "lock: weights truncated": row(
            f"fixtures lock {FX} --no-rebuild", 3, "cache clear", corrupt="weights truncated"
        ),
        "lock: artifact fails its check": row(
            f"fixtures lock {FX}", 1, "Refusing to lock fixture 'tiny-m'", corrupt="fails check"
        ),
        "lock.json a list": row(
            "fixtures verify --fixtures-dir {in}/fx-lock-list", 2, "'fixtures'"
        ),
        "lock.json files not digests": row(
            "fixtures verify --fixtures-dir {in}/fx-lock-files", 2, "fixtures.d.files"
        ),
        "lock.json not json": row(
            "fixtures verify --fixtures-dir {in}/fx-lock-bad --fresh --json", 2, "lock.json"
        ),
        "lock: lock.json a list": row(
            "fixtures lock d --fixtures-dir {in}/fx-lock-list --fresh --json", 2, "'fixtures'"
        ),
        "spec not a table": row("fixtures build --fixtures-dir {in}/fx-spec --json", 2, "spec"),
        "cache dir a file": row(
            "fixtures build --fixtures-dir {in}/fx-ok --cache-dir {in}/a-file", 2, "is a file"
        ),
        "cache read-only": row(
            "fixtures build --fixtures-dir {in}/fx-ok --cache-dir {ro}/c", 3, "read-only", "ro"
        ),
        "compat: no versions": row("fixtures compat", 2, "--versions"),
        "compat: a version that is not one": row(
            "fixtures compat --versions x!y --package transformers --fixtures-dir {in}/fx-ok "
            "--cache-dir {in}/a-file --find-links {in}/nope --json",
            2,
            "x!y",
        ),
    },
    "cache": {
        "no action": row("cache", 2, "required"),
        "ls: cache dir a file": row("cache ls --cache-dir {in}/a-file --json", 2, "is a file"),
        "clear: cache dir a file": row(
            "cache clear --cache-dir {in}/a-file --json", 2, "is a file"
        ),
    },
    "dumps": {
        "missing folder": row("dumps diff {in}/nope {in}/nope", 2, "nope"),
        "align-steps not A:B": row(
            "dumps diff {dump}/good {dump}/good --align-steps 2-0", 2, "A:B"
        ),
        "versions: no command": row("dumps versions pkg 1.0 2.0", 2, "no command"),
        "versions: out not empty": row(
            "dumps versions pkg 1.0 2.0 -o {in}/full-out -- true", 2, "not empty"
        ),
        "versions: does not install": row(
            "dumps versions pkg 1.0 2.0 --modules x --tensors full --find-links {in}/nope "
            "--index-url http://127.0.0.1:9 --cache-dir {in}/empty --timeout 5 --json -- true",
            2,
            "does not install",
        ),
        "not a dump": row("dumps diff {in}/empty {in}/empty", 2, "not a tinykit dump"),
        "a file": row("dumps diff {in}/a-file {in}/a-file", 2, "a-file"),
        "manifest not json": row("dumps diff {in}/cfg-bad {in}/cfg-bad", 2, "no manifest"),
        "atol negative": row("dumps diff {in}/empty {in}/empty --atol -1", 2, "--atol"),
        "no action": row("dumps", 2, "required"),
        "index: step a string": row(
            "dumps diff {dump}/good {dump}/step-a-string", 2, "field 'step'"
        ),
        "index: a record a list": row("dumps diff {dump}/good {dump}/record-a-list", 2, "line 1"),
        "index: a tensor without shape": row(
            "dumps diff {dump}/good {dump}/tensor-no-shape", 2, "shape"
        ),
        "manifest: model a list": row("dumps diff {dump}/model-a-list {dump}/good", 2, "'model'"),
        "manifest: a shard outside": row(
            "dumps diff {dump}/shard-outside {dump}/good", 2, "not a file inside"
        ),
        "shard: garbage of the right size": row(
            "dumps diff {dump}/good {dump}/shard-garbage", 2, "readably"
        ),
        "rtol not a number": row("dumps diff {dump}/good {dump}/good --rtol x", 2, "--rtol"),
        "plot over a kept file": row(
            "dumps diff {dump}/good {dump}/good --plot {in}/kept.png", 2, "--force"
        ),
        "html folder missing": row(
            "dumps diff {dump}/good {dump}/good --html {in}/nope/d.html --force --json",
            2,
            "does not exist",
        ),
    },
    "hub serve": {
        "missing folder": row("hub serve {in}/nope", 2, "nope"),
        "a file": row("hub serve {in}/a-file", 2, "a-file"),
        "port too big": row("hub serve {in}/empty --port 99999", 2, "--port"),
        "port negative": row("hub serve {in}/empty --port -1", 2, "--port"),
        "port not a number": row("hub serve {in}/empty --port http", 2, "--port"),
        "read timeout zero": row("hub serve {in}/empty --read-timeout 0", 2, "--read-timeout"),
        "no action": row("hub", 2, "required"),
        "quiet, json, read-only, token: a file": row(
            "hub serve {in}/a-file --quiet --json --read-only --token t", 2, "a-file"
        ),
    },
    "standins": {
        "no action": row("standins", 2, "required"),
        "manifest missing": row("standins build {in}/nope.toml -o {out}/h", 2, "nope.toml"),
        "manifest not toml": row("standins build {in}/bad.toml -o {out}/h", 2, "not valid TOML"),
        "unknown field": row("standins build {in}/standins-typo.toml -o {out}/h", 2, "'hiden'"),
        "bad repo id": row("standins build {in}/standins-id.toml -o {out}/h", 2, "repo id"),
        "unknown source": row("standins build {in}/standins-src.toml -o {out}/h", 2, "o/n"),
        "no -o": row("standins build {in}/standins-typo.toml", 2, "--out"),
        "output exists": row(
            "standins build {in}/standins-src.toml -o {in}/empty-out", 2, "--force"
        ),
        "discover: no command": row("standins discover -o {out}/m.toml --", 2, "no command"),
        "discover: not found": row("standins discover -- {in}/no-such-cmd", 2, "no-such-cmd"),
        "force over the manifest's own folder": row(
            "standins build {in}/hubwith/standins.toml -o {in}/hubwith --force", 2, "an input"
        ),
        "force over a folder with other files": row(
            "standins build {in}/standins-ok.toml -o {in}/hubstray --force", 2, "notes.txt"
        ),
        "model id in the datasets tree": row(
            "standins build {in}/standins-ds.toml -o {out}/h", 2, "reserved"
        ),
        "cache dir a file": row(
            "standins build {in}/standins-ok.toml -o {out}/h --cache-dir {in}/a-file", 2, "a file"
        ),
        "keep-going, json: manifest missing": row(
            "standins build {in}/nope.toml -o {out}/h --keep-going --json", 2, "nope.toml"
        ),
        "discover: -o a folder": row("standins discover -o {in}/empty -- true", 2, "a folder"),
        "discover: -o a kept file": row(
            "standins discover -o {in}/kept.toml -- true", 2, "--force"
        ),
        "discover: -o read-only": row(
            "standins discover -o {ro}/m.toml --force -- true", 3, "read-only", "ro"
        ),
        "discover: timeout zero": row("standins discover --timeout 0 -- true", 2, "--timeout"),
        "discover: passes zero": row("standins discover --passes 0 -- true", 2, "--passes"),
        "discover: sources missing": row(
            "standins discover --sources {in}/nope --json -- true", 2, "nope"
        ),
        "discover: cache dir a file": row(
            "standins discover --cache-dir {in}/a-file -- true", 2, "a file"
        ),
    },
}
