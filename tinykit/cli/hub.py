"""`tinykit hub serve DIR [--port N]`: serve a folder tree as a Hugging Face Hub on 127.0.0.1."""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from tinykit.cli._args import count, seconds

EXAMPLES = """examples:
  tinykit hub serve ../shared/hub-files --port 8765
  # then, in the client's shell:
  export HF_ENDPOINT=http://127.0.0.1:8765 HF_TOKEN=hf_tinykit_... HF_HUB_DISABLE_XET=1 ...
  python -c 'from transformers import AutoConfig; AutoConfig.from_pretrained("Qwen/Qwen3-8B")'
"""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("hub", help="a loopback Hugging Face Hub for offline tests")
    commands = parser.add_subparsers(dest="hub_command", metavar="COMMAND", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve DIR (<org>/<name>/..., datasets/<org>/<name>/...) on 127.0.0.1",
        description="Serve a folder tree over the Hub HTTP protocol on 127.0.0.1 until Ctrl-C "
        "or SIGTERM. Pushes (create_repo, upload_folder, push_to_hub) are written into DIR and "
        "need the HF_TOKEN printed at start; requests from web pages (a foreign Origin) are refused.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("dir", help="folder laid out as <org>/<name>/<files>")
    serve.add_argument(
        "--port", type=count(0, 65535), default=0, help="port to listen on (default: a free one)"
    )
    serve.add_argument("--quiet", action="store_true", help="do not print one line per request")
    serve.add_argument("--json", action="store_true", help="print the endpoint as JSON")
    serve.add_argument("--read-only", action="store_true", help="refuse every write (403)")
    serve.add_argument(
        "--token", help="the write token clients must send (default: a fresh random one)"
    )
    serve.add_argument(
        "--read-timeout",
        type=seconds,
        default=30.0,
        help="seconds a client may stall mid-request before it is dropped (default: 30)",
    )
    serve.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from tinykit._procs import stop_on_sigterm
    from tinykit.cli import emit
    from tinykit.hub.client import CLIENT_ENV
    from tinykit.hub.server import serve

    def show(record: object) -> None:
        print(record, file=sys.stderr, flush=True)

    options = {"token": args.token, "read_only": args.read_only, "read_timeout": args.read_timeout}
    # SIGTERM, like Ctrl-C, stops the server through the same exit (the LFS folder is removed);
    # either is how a server is meant to stop, so both exit 0, wherever they land.
    try:
        with (
            stop_on_sigterm(),
            serve(args.dir, args.port, None if args.quiet else show, **options) as hub,
        ):
            env = {"HF_ENDPOINT": hub.endpoint, **CLIENT_ENV}
            if not args.read_only:  # printed for the user's clients, as a notebook server does
                env["HF_TOKEN"] = hub.token
            exports = "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
            text = (
                f"Serving {args.dir} at {hub.endpoint} (Ctrl-C stops). For clients, run:\n{exports}"
            )
            info = {"endpoint": hub.endpoint, "cdn_endpoint": hub.cdn_endpoint, "env": env}
            emit(info, args.json, text)
            sys.stdout.flush()
            # Ctrl-C/SIGTERM arrive as KeyboardInterrupt in this sleep. (A SIGINT ignored by the
            # parent stays ignored, as nohup means it: `hub serve &` from a script stops on TERM.)
            while True:
                time.sleep(0.2)
    except KeyboardInterrupt:
        return 0
    return 0
