"""Rows of the fault table: the top level, the builders (make-tiny*, make-*-dataset), verify and slice."""

from __future__ import annotations

from conftest import HUB_FILES

from fault_table.table import Row, row

BERT = HUB_FILES / "google-bert" / "bert-base-uncased"
VIT = HUB_FILES / "google" / "vit-base-patch16-224-in21k"

ROWS: dict[str, dict[str, Row]] = {
    "tinykit": {
        "no command": row("", 2, "required"),
        "unknown command": row("frobnicate", 2, "unknown command"),
        "unknown option": row("make-tiny llama --no-such-option", 2, "unrecognized"),
        "debug: the traceback, then the one line": row(
            "--debug make-tiny {in}/nope -o {out}/t", 2, "nope", tb=True
        ),
        "version with a command": row("--version make-tiny", 0, "tinykit"),
    },
    "make-tiny": {
        "missing folder": row("make-tiny {in}/nope -o {out}/t", 2, "nope"),
        "empty folder": row("make-tiny {in}/empty -o {out}/t", 2, "config"),
        "config not json": row("make-tiny {in}/cfg-bad -o {out}/t", 2, "config"),
        "config a list": row("make-tiny {in}/cfg-list -o {out}/t", 2, "config"),
        "unknown model_type": row("make-tiny {in}/cfg-unknown -o {out}/t", 2, "no_such_model"),
        "unknown bare type": row("make-tiny no_such_model_type -o {out}/t", 2, "no_such"),
        "hidden not a number": row("make-tiny llama --hidden abc", 2, "--hidden"),
        "layers not a number": row("make-tiny llama --layers many", 2, "--layers"),
        "dtype unknown": row("make-tiny llama --dtype float8", 2, "--dtype"),
        "mode unknown": row("make-tiny llama --mode huge", 2, "--mode"),
        "hidden zero": row("make-tiny llama --hidden 0 -o {out}/t", 2, "hidden"),
        "hidden negative": row("make-tiny llama --hidden -8 -o {out}/t", 2, "hidden"),
        "output exists": row("make-tiny llama -o {in}/empty-out", 2, "--force"),
        "recipe missing": row("make-tiny llama --recipe {in}/nope.toml -o {out}/t", 2, "nope"),
        "recipe not toml": row("make-tiny llama --recipe {in}/bad.toml -o {out}/t", 2, "bad.toml"),
        "class unknown": row(
            "make-tiny llama --class LlamaForSequenceClasification -o {out}/t", 2, "Did you mean"
        ),
        "class of another type": row(
            "make-tiny llama --class BertModel -o {out}/t", 2, "another model type"
        ),
        "task unknown": row("make-tiny llama --task causl-lm -o {out}/t", 2, "'causal-lm'"),
        "task the type lacks": row(
            "make-tiny llama --task masked-lm -o {out}/t", 2, "sequence-classification"
        ),
        "class and task disagree": row(
            "make-tiny bert --class BertModel --task masked-lm -o {out}/t", 2, "not both"
        ),
        "num-labels zero": row("make-tiny llama --num-labels 0 -o {out}/t", 2, "num_labels"),
        "num-labels not a number": row("make-tiny llama --num-labels many", 2, "--num-labels"),
        "preset unknown": row("make-tiny llama --preset hub-tiny-randm", 2, "'hub-tiny-random'"),
        "exact vocab, faithful": row(
            f"make-tiny {BERT} --mode faithful --exact-vocab -o {{out}}/t", 2, "--exact-vocab"
        ),
        "exact vocab, no text": row(
            f"make-tiny {VIT} --exact-vocab -o {{out}}/t", 2, "takes no text"
        ),
        "chat template missing": row(
            "make-tiny llama --chat-template {in}/nope.jinja -o {out}/t", 2, "nope.jinja"
        ),
        "chat template empty": row(
            "make-tiny llama --chat-template {in}/empty.jinja -o {out}/t", 2, "empty"
        ),
        "tokenizer source missing": row(
            "make-tiny llama --tokenizer {in}/nope -o {out}/t", 2, "nope"
        ),
        "faithful, tokenizer does not load": row(
            "make-tiny {in}/faithful-bad --mode faithful -o {out}/t", 2, "do not load"
        ),
        "recipe architectures not a list": row(
            "make-tiny bert --recipe {in}/arch-str.toml -o {out}/t", 2, "architectures"
        ),
        "output parent a file": row("make-tiny llama -o {in}/a-file/t", 3, "a-file"),
        "remote code, not trusted": row(
            "make-tiny {in}/remote-code -o {out}/t", 2, "--trust-remote-code"
        ),
        "remote code, files missing": row(
            "make-tiny {in}/remote-code-no-py -o {out}/t --trust-remote-code",
            2,
            "modeling_tinyrc.py",
        ),
        "disk full": row("make-tiny llama -o {full}/t", 3, "space", "full"),
        "read-only fs": row("make-tiny llama -o {ro}/t", 3, "read-only", "ro"),
        "revision of a local folder that is missing": row(
            "make-tiny {in}/nope --revision v1 -o {out}/t", 2, "nope"
        ),
        "heads not a number": row("make-tiny llama --heads x", 2, "--heads"),
        "kv-heads not a number": row("make-tiny llama --kv-heads x", 2, "--kv-heads"),
        "intermediate not a number": row("make-tiny llama --intermediate x", 2, "--intermediate"),
        "vocab not a number": row("make-tiny llama --vocab x", 2, "--vocab"),
        "experts not a number": row("make-tiny llama --experts x", 2, "--experts"),
        "experts-per-tok not a number": row(
            "make-tiny llama --experts-per-tok x", 2, "--experts-per-tok"
        ),
        "expert-intermediate not a number": row(
            "make-tiny llama --expert-intermediate x", 2, "--expert-intermediate"
        ),
        "max-positions not a number": row(
            "make-tiny llama --max-positions x", 2, "--max-positions"
        ),
        "window not a number": row("make-tiny llama --window x", 2, "--window"),
        "image-size not a number": row("make-tiny llama --image-size x", 2, "--image-size"),
        "patch-size not a number": row("make-tiny llama --patch-size x", 2, "--patch-size"),
        "seed not a number": row("make-tiny llama --seed x", 2, "--seed"),
        "pooling unknown": row("make-tiny bert --pooling median -o {out}/t", 2, "median"),
        "tokens-from missing folder": row(
            "make-tiny llama --tokens-from {in}/nope -o {out}/t", 2, "nope"
        ),
        "add-token empty": row("make-tiny llama --add-token= -o {out}/t", 2, "add_tokens"),
        "special-token without a role": row(
            "make-tiny llama --special-token pad -o {out}/t", 2, "ROLE=TOKEN"
        ),
        "force over a folder tinykit did not write": row(
            "make-tiny llama -o {in}/full-out --force", 2, "--force will not replace"
        ),
        "force over the current folder": row(
            "make-tiny llama -o {out}/.. --force", 2, "the current folder"
        ),
        "push-to-hub not a repo id": row(
            "make-tiny {in}/nope --push-to-hub not/a/repo -o {out}/t", 2, "nope"
        ),
        "no-check and json, bad source": row(
            "make-tiny {in}/nope --no-check --json -o {out}/t", 2, "nope"
        ),
    },
    "make-tiny-tokenizer": {
        "missing folder": row("make-tiny-tokenizer {in}/nope -o {out}/t", 2, "nope"),
        "no tokenizer files": row("make-tiny-tokenizer {in}/empty -o {out}/t", 2, "tokenizer"),
        "corrupt tokenizer.json": row(
            "make-tiny-tokenizer {in}/tok-bad -o {out}/t", 2, "tokenizer"
        ),
        "vocab not a number": row("make-tiny-tokenizer {in}/tok-bad --vocab lots", 2, "--vocab"),
        "vocab zero": row(f"make-tiny-tokenizer {BERT} --vocab 0 -o {{out}}/t", 2, "vocab"),
        "output exists": row(f"make-tiny-tokenizer {BERT} -o {{in}}/empty-out", 2, "--force"),
        "output parent a file": row(f"make-tiny-tokenizer {BERT} -o {{in}}/a-file/t", 3, "a-file"),
        "disk full": row(f"make-tiny-tokenizer {BERT} -o {{full}}/t", 3, "space", "full"),
        "read-only fs": row(f"make-tiny-tokenizer {BERT} -o {{ro}}/t", 3, "read-only", "ro"),
        "method unknown": row(f"make-tiny-tokenizer {BERT} --method guess", 2, "--method"),
        "force over a folder tinykit did not write": row(
            f"make-tiny-tokenizer {BERT} -o {{in}}/full-out --force", 2, "--force will not"
        ),
        "json, missing folder": row("make-tiny-tokenizer {in}/nope --json -o {out}/t", 2, "nope"),
    },
    "make-tiny-dataset": {
        "missing file": row("make-tiny-dataset {in}/nope.jsonl -o {out}/d", 2, "nope"),
        "empty jsonl": row("make-tiny-dataset {in}/empty.jsonl -o {out}/d", 2, "no rows"),
        "corrupt parquet": row("make-tiny-dataset {in}/bad.parquet -o {out}/d", 2, "Parquet"),
        "not json rows": row("make-tiny-dataset {in}/bad.jsonl -o {out}/d", 2, "JSON"),
        "rows zero": row("make-tiny-dataset {in}/rows.jsonl --rows 0", 2, "--rows"),
        "rows negative": row("make-tiny-dataset {in}/rows.jsonl --rows -3", 2, "--rows"),
        "rows huge": row("make-tiny-dataset {in}/rows.jsonl --rows 1000000000", 2, "--rows"),
        "rows not a number": row("make-tiny-dataset {in}/rows.jsonl --rows many", 2, "--rows"),
        "unknown split": row(
            "make-tiny-dataset {in}/rows.jsonl --split nope -o {out}/d", 2, "nope"
        ),
        "output a file": row("make-tiny-dataset {in}/rows.jsonl -o {in}/a-file", 2, "a-file"),
        "output exists": row("make-tiny-dataset {in}/rows.jsonl -o {in}/full-out", 2, "--force"),
        "output parent a file": row(
            "make-tiny-dataset {in}/rows.jsonl -o {in}/a-file/d", 3, "a-file"
        ),
        "disk full": row("make-tiny-dataset {in}/rows.jsonl -o {full}/d", 3, "space", "full"),
        "read-only fs": row("make-tiny-dataset {in}/rows.jsonl -o {ro}/d", 3, "read-only", "ro"),
        "config unknown": row(
            "make-tiny-dataset {in}/rows.jsonl --config nope -o {out}/d", 2, "nope"
        ),
        "revision of a missing file": row(
            "make-tiny-dataset {in}/nope.jsonl --revision v1 -o {out}/d", 2, "nope"
        ),
        "force over a folder tinykit did not write": row(
            "make-tiny-dataset {in}/rows.jsonl -o {in}/full-out --force", 2, "--force will not"
        ),
        "json, missing file": row("make-tiny-dataset {in}/nope.jsonl --json -o {out}/d", 2, "nope"),
    },
    "make-synthetic-dataset": {
        "features missing": row("make-synthetic-dataset --features {in}/nope.json", 2, "nope"),
        "features not json": row("make-synthetic-dataset --features {in}/bad.json", 2, "not JSON"),
        "features a list": row("make-synthetic-dataset --features {in}/list.json", 2, "list"),
        "features empty": row("make-synthetic-dataset --features {in}/empty.json", 2, "dict"),
        "features bad type": row(
            "make-synthetic-dataset --features {in}/feat-bad.json", 2, "Features"
        ),
        "no schema at all": row("make-synthetic-dataset", 2, "required"),
        "both schemas": row("make-synthetic-dataset x --features {in}/feat.json", 2, "not allowed"),
        "rows zero": row("make-synthetic-dataset --features {in}/feat.json --rows 0", 2, "--rows"),
        "rows huge": row(
            "make-synthetic-dataset --features {in}/feat.json --rows 99999999", 2, "--rows"
        ),
        "seed not a number": row(
            "make-synthetic-dataset --features {in}/feat.json --seed x", 2, "--seed"
        ),
        "rows per split not a count": row(
            "make-synthetic-dataset --features {in}/feat.json --rows train=x -o {out}/d",
            2,
            "--rows",
        ),
        "rows per split zero": row(
            "make-synthetic-dataset --features {in}/feat.json --rows train=0 -o {out}/d",
            2,
            "rows['train']=0",
        ),
        "rows per split repeated": row(
            "make-synthetic-dataset --features {in}/feat.json --rows a=1,a=2 -o {out}/d",
            2,
            "repeats",
        ),
        "rows name a split the source lacks": row(
            "make-synthetic-dataset {in}/rows.jsonl --rows validation=2 -o {out}/d", 2, "validation"
        ),
        "output exists": row(
            "make-synthetic-dataset --features {in}/feat.json -o {in}/full-out", 2, "--force"
        ),
        "output parent a file": row(
            "make-synthetic-dataset --features {in}/feat.json -o {in}/a-file/d", 3, "a-file"
        ),
        "disk full": row(
            "make-synthetic-dataset --features {in}/feat.json -o {full}/d", 3, "space", "full"
        ),
        "read-only fs": row(
            "make-synthetic-dataset --features {in}/feat.json -o {ro}/d", 3, "read-only", "ro"
        ),
        "force over a folder tinykit did not write": row(
            "make-synthetic-dataset --features {in}/feat.json -o {in}/full-out --force",
            2,
            "--force will not",
        ),
        "no-nulls and json, features missing": row(
            "make-synthetic-dataset --features {in}/nope.json --no-nulls --json", 2, "nope"
        ),
    },
    "verify": {
        "missing folder": row("verify {in}/nope", 2, "nope"),
        "empty folder": row("verify {in}/empty", 2, "config"),
        "config not json": row("verify {in}/cfg-bad", 2, "config"),
        "weights missing": row("verify {model}/no-weights", 1, "safetensors"),
        "weights truncated": row("verify {model}/truncated", 1, "safetensors"),
        "weights garbage": row("verify {model}/garbage", 1, "safetensors"),
        "config mismatched": row("verify {model}/mismatched", 1, "do not load"),
        "architecture misspelled": row(
            "verify {model}/arch-typo", 2, "Did you mean 'LlamaForCausalLM'?"
        ),
        "own code, not trusted": row("verify {model}/remote-code", 2, "--trust-remote-code"),
        "json, missing folder": row("verify {in}/nope --json", 2, "nope"),
        "trusted, missing folder": row("verify {in}/nope --trust-remote-code", 2, "nope"),
    },
    "slice": {
        "missing folder": row("slice {in}/nope -o {out}/s", 2, "nope"),
        "no -o": row("slice {model}/good", 2, "--out"),
        "output exists": row("slice {model}/good -o {in}/empty", 2, "already exists"),
        "weights truncated": row("slice {model}/truncated -o {out}/s", 2, "truncated"),
        "weights garbage": row("slice {model}/garbage -o {out}/s", 2, "safetensors header"),
        "tensor offsets past the data": row(
            "slice {model}/slice-offsets -o {out}/s", 2, "spanning"
        ),
        "tensor dtype unknown": row("slice {model}/slice-dtype -o {out}/s", 2, "'F128'"),
        "header a list": row("slice {model}/slice-header-list -o {out}/s", 2, "not an object"),
        "index not json": row("slice {model}/slice-index-bad -o {out}/s", 2, "index.json"),
        "index weight_map a list": row(
            "slice {model}/slice-index-list -o {out}/s", 2, "'weight_map'"
        ),
        "index names a missing shard": row(
            "slice {model}/slice-index-absent -o {out}/s", 2, "not there"
        ),
        "config not json": row("slice {model}/slice-config-bad -o {out}/s", 2, "config.json"),
        "pickles only": row("slice {model}/pickle-only -o {out}/s", 2, "never unpickles"),
        "layers not a count": row("slice {model}/good --layers many -o {out}/s", 2, "many"),
        "layers past the depth": row("slice {model}/good --layers 0,99 -o {out}/s", 2, "99"),
        "dtype unknown": row("slice {model}/good --dtype int4 -o {out}/s", 2, "--dtype"),
        "max shard size zero": row(
            "slice {model}/good --max-shard-size 0 -o {out}/s", 2, "--max-shard-size"
        ),
        "revision, check, json: missing folder": row(
            "slice {in}/nope --revision v1 --check --json -o {out}/s", 2, "nope"
        ),
    },
}
