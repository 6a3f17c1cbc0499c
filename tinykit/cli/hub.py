"""`tinykit hub serve DIR [--port N]`: serve a folder tree as a Hugging Face Hub on 127.0.0.1."""

from __future__ import annotations

import argparse
import shlex
import sys
import threading

EXAMPLES = """examples:
  tinykit hub serve ../shared/hub-files --port 8765
  # then, in the client's shell:
  export HF_ENDPOINT=http://127.0.0.1:8765 HF_HUB_DISABLE_XET=1 HF_UPDATE_DOWNLOAD_COUNTS=0
  python -c 'from transformers import AutoConfig; AutoConfig.from_pretrained("Qwen/Qwen3-8B")'
"""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("hub", help="a loopback Hugging Face Hub for offline tests")
    commands = parser.add_subparsers(dest="hub_command", metavar="COMMAND", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve DIR (<org>/<name>/..., datasets/<org>/<name>/...) on 127.0.0.1",
        description="Serve a folder tree over the Hub HTTP protocol on 127.0.0.1 until Ctrl-C. "
        "Pushes (create_repo, upload_folder, push_to_hub) are written into DIR.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("dir", help="folder laid out as <org>/<name>/<files>")
    serve.add_argument(
        "--port", type=int, default=0, help="port to listen on (default: a free one)"
    )
    serve.add_argument("--quiet", action="store_true", help="do not print one line per request")
    serve.add_argument("--json", action="store_true", help="print the endpoint as JSON")
    serve.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from tinykit.cli import emit
    from tinykit.hub.client import CLIENT_ENV
    from tinykit.hub.server import serve

    def show(record: object) -> None:
        print(record, file=sys.stderr, flush=True)

    with serve(args.dir, args.port, on_request=None if args.quiet else show) as hub:
        env = {"HF_ENDPOINT": hub.endpoint, **CLIENT_ENV}
        exports = "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        text = f"Serving {args.dir} at {hub.endpoint} (Ctrl-C stops). For clients, run:\n{exports}"
        emit(
            {"endpoint": hub.endpoint, "cdn_endpoint": hub.cdn_endpoint, "env": env},
            args.json,
            text,
        )
        sys.stdout.flush()
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            return 0
    return 0
