"""The Hugging Face Hub, client side: the only tinykit module that imports huggingface_hub.

- `download_source(repo_id, revision)`: the config/tokenizer/processor files of a model repo,
  never its weights, and the commit sha they came from.
- `repo_files(repo_id, revision)`, `download_files(...)`, `read_range(...)`, `stream_range(...)`:
  a repo's file list, some small files, and byte ranges of a big one (HTTP Range), for slicing
  real weights without downloading whole shards. `download_model(...)`: everything (--check).
- `push_folder(folder, repo_id)`: publish a built fixture.
- `use_endpoint(endpoint)`: point the *already imported* Hub clients of this process at another
  endpoint (the loopback Hub) and back.
- `hub_errors(repo_id, revision)`: every Hub failure becomes one tinykit error (`HubError`,
  `OfflineCacheMiss`), with the cause kept (`raise ... from e`); inside it, every request has a
  timeout (`bounded_requests`), so a Hub that accepts and then stalls fails instead of hanging.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from tinykit.errors import HubError, OfflineCacheMiss, UsageError
from tinykit.hub.layout import SHARD_INDEX_SUFFIX, WEIGHT_SUFFIXES

# What make-tiny needs from a model repo: configs, generation config, tokenizer, processor and
# chat-template files. Anything else (weights above all) is never downloaded.
SOURCE_PATTERNS = [
    "*.json",
    "*.txt",
    "*.model",
    "tokenizer.model.*",
    "*.jinja",
    "*.tiktoken",
    "*.vocab",
]
# Weight files (and their shard indexes: useless without the shards) are never downloaded, even
# when a repo names them in a way the allow-list above would match.
WEIGHT_PATTERNS = [f"*{suffix}" for suffix in (*sorted(WEIGHT_SUFFIXES), SHARD_INDEX_SUFFIX)]


@contextlib.contextmanager
def hub_errors(repo_id: str, revision: str | None = None) -> Iterator[None]:
    """Translate any huggingface_hub/httpx failure inside the block into one tinykit error."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub import errors as hf

    rev = f"@{revision}" if revision else ""
    where = f"{repo_id!r}{' at revision ' + repr(revision) if revision else ''}"
    attrs = {"repo_id": repo_id, "revision": revision}
    try:
        with bounded_requests():
            yield
    except hf.GatedRepoError as e:  # before RepositoryNotFoundError, its parent
        raise HubError(
            f"Hub repo {repo_id!r} is gated and this request has no access (HTTP "
            f"{e.response.status_code} from {constants.ENDPOINT}). Accept its terms at "
            f"{constants.ENDPOINT}/{repo_id}, then log in with `hf auth login` or set HF_TOKEN.",
            **attrs,
        ) from e
    except hf.RepositoryNotFoundError as e:
        raise HubError(
            f"Hub repo {repo_id!r} was not found on {constants.ENDPOINT} (HTTP "
            f"{e.response.status_code}). Check the id (org/name); if the repo is private, log in "
            "with `hf auth login` or set HF_TOKEN.",
            **attrs,
        ) from e
    except hf.RevisionNotFoundError as e:
        raise HubError(
            f"Revision {revision!r} does not exist in Hub repo {repo_id!r} on "
            f"{constants.ENDPOINT}. Use an existing branch, tag or commit sha "
            f"({repo_id}@<rev>), or drop @{revision} for the default branch.",
            **attrs,
        ) from e
    except hf.RemoteEntryNotFoundError as e:
        raise HubError(
            f"A file of Hub repo {where} is missing on {constants.ENDPOINT}: "
            f"{_first_line(e)}. Check that {repo_id}{rev} is the repo you meant.",
            **attrs,
        ) from e
    except (hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled) as e:
        if constants.is_offline_mode():
            raise OfflineCacheMiss(
                f"Hub repo {where} is not in the local cache ({constants.HF_HUB_CACHE}) and "
                "HF_HUB_OFFLINE=1 forbids downloading it. Run once with network access (unset "
                "HF_HUB_OFFLINE) to fill the cache, or pass a local folder instead of org/name.",
                **attrs,
            ) from e
        raise HubError(
            f"Could not reach the Hub at {constants.ENDPOINT} to fetch {where} ({_cause(e)}), and "
            "it is not in the local cache. Check the network or HF_ENDPOINT; to work offline, fill "
            "the cache once and set HF_HUB_OFFLINE=1.",
            **attrs,
        ) from e
    except hf.HFValidationError as e:
        raise UsageError(
            f"{repo_id!r} is not a valid Hub repo id: {_first_line(e)}. Use org/name[@revision], "
            "or the path of a local folder.",
            **attrs,
        ) from e
    except hf.HfHubHTTPError as e:
        raise HubError(
            f"The Hub at {constants.ENDPOINT} failed a request for {where}: {_first_line(e)}. "
            "Retry later; if it persists, check HF_ENDPOINT and your token (`hf auth whoami`).",
            **attrs,
        ) from e
    except httpx2.HTTPError as e:
        raise HubError(
            f"Could not reach the Hub at {constants.ENDPOINT} for {where}: {type(e).__name__}: "
            f"{e}. Check the network or HF_ENDPOINT, or work offline with HF_HUB_OFFLINE=1 and a "
            "filled cache.",
            **attrs,
        ) from e


@contextlib.contextmanager
def bounded_requests() -> Iterator[None]:
    """While the block runs, a request of huggingface_hub's shared client that has no timeout
    at all (many of its calls pass timeout=None: model_info, repo_info, the tree listing) gets
    HF_HUB_DOWNLOAD_TIMEOUT seconds (default 10) per connect, read and write. Requests with a
    timeout of their own keep it; the hook is removed afterwards."""
    from huggingface_hub.utils import get_session

    hooks = get_session().event_hooks["request"]
    hooks.append(_bound)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            hooks.remove(_bound)


def _bound(request) -> None:  # an httpx request hook
    from huggingface_hub import constants

    timeout = request.extensions.get("timeout") or {}
    if all(value is None for value in timeout.values()):
        seconds = float(constants.HF_HUB_DOWNLOAD_TIMEOUT)
        request.extensions["timeout"] = dict.fromkeys(("connect", "read", "write", "pool"), seconds)


def download_source(
    repo_id: str, revision: str | None = None, *, include_code: bool = False
) -> tuple[Path, str]:
    """Download a model repo's config/generation/tokenizer/processor/chat-template files.

    Weights are never downloaded (allow-list by name, plus a deny-list of weight files).
    `include_code=True` adds the repo's `*.py` files (remote code, for --trust-remote-code).
    Honours HF_HUB_OFFLINE=1 when the cache holds the files.

    Returns:
        The local snapshot folder and the resolved commit sha.

    Raises:
        HubError: not found, gated, bad revision, network unreachable, server failure.
        OfflineCacheMiss: offline mode and the files are not cached.
    """
    from huggingface_hub import snapshot_download

    with hub_errors(repo_id, revision), _quiet_progress():
        downloaded = snapshot_download(
            repo_id,
            revision=revision,
            allow_patterns=SOURCE_PATTERNS + (["*.py"] if include_code else []),
            ignore_patterns=WEIGHT_PATTERNS,
        )
    folder = Path(downloaded)
    if not folder.is_dir():  # snapshot_download returns a folder it never made when nothing matched
        raise HubError(
            f"Hub repo {repo_id!r} holds none of the files tinykit reads (config, tokenizer, "
            f"processor, chat template: {', '.join(SOURCE_PATTERNS)}). Check that it is a model "
            "repo with a config.json, or pass a local folder instead.",
            repo_id=repo_id,
            revision=revision,
        )
    # The cache layout is .../snapshots/<commit sha>, online and offline alike.
    return folder, folder.name


def repo_files(repo_id: str, revision: str | None = None) -> tuple[str, list[str]]:
    """The commit sha `revision` resolves to and the repo's file names at that commit."""
    from huggingface_hub import HfApi

    with hub_errors(repo_id, revision):
        info = HfApi().model_info(repo_id, revision=revision, files_metadata=False)
    return info.sha or "", [s.rfilename for s in info.siblings or []]


def download_files(repo_id: str, revision: str, filenames: list[str]) -> Path:
    """These files of a repo (configs, a shard index, tokenizer files), fetched in parallel into
    the Hub cache; returns the snapshot folder they are in."""
    from huggingface_hub import snapshot_download

    with hub_errors(repo_id, revision), _quiet_progress():
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=filenames))


def download_model(repo_id: str, revision: str) -> Path:
    """The whole repo, weights included (only `tinykit slice --check` wants the full model)."""
    from huggingface_hub import snapshot_download

    with hub_errors(repo_id, revision), _quiet_progress():
        return Path(snapshot_download(repo_id, revision=revision))


@contextlib.contextmanager
def stream_range(
    repo_id: str, filename: str, revision: str, start: int, end: int
) -> Iterator[Iterator[bytes]]:
    """Bytes [start, end) of a repo file, as chunks, through one HTTP Range request.

    The resolve URL redirects LFS files to the CDN; huggingface_hub's session follows it and
    drops the token on the other origin, as it does for its own downloads.
    """
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_stream_backoff

    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=constants.ENDPOINT)
    headers = {**build_hf_headers(), "Range": f"bytes={start}-{end - 1}"}
    with hub_errors(repo_id, revision), http_stream_backoff("GET", url, headers=headers) as r:
        hf_raise_for_status(r)
        if r.status_code != 206:  # a server that ignores Range would send the whole file
            raise HubError(
                f"The Hub at {constants.ENDPOINT} answered a byte-range read of {filename} in "
                f"{repo_id!r} with HTTP {r.status_code}, not 206. Check HF_ENDPOINT: slicing "
                "needs a Hub (or proxy) that serves HTTP Range requests.",
                repo_id=repo_id,
                revision=revision,
            )
        yield r.iter_bytes(1 << 20)


def read_range(repo_id: str, filename: str, revision: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of a repo file (a safetensors header, say)."""
    with stream_range(repo_id, filename, revision, start, end) as chunks:
        return b"".join(chunks)


def push_folder(
    folder: Path, repo_id: str, *, repo_type: str = "model", private: bool = False
) -> str:
    """Create `repo_id` if needed and upload every file of `folder`; returns the commit URL."""
    from huggingface_hub import HfApi

    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(
            f"Cannot push {str(folder)!r} to {repo_id!r}: it is not a directory. "
            "Pass the folder that make-tiny wrote (its --out)."
        )
    api = HfApi()
    with hub_errors(repo_id):
        api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
        info = api.upload_folder(
            folder_path=folder,
            repo_id=repo_id,
            repo_type=repo_type,
            commit_message=f"Upload {folder.name} with tinykit",
        )
    return info.commit_url


# -- pointing this process's Hub clients at another endpoint ----------------------------------

# Environment for clients of a loopback Hub; subprocesses inherit it and modules imported later
# read it. Xet is off because the loopback Hub speaks plain HTTP and LFS only; the download
# counter is the `datasets` HEAD to s3.amazonaws.com (environment.md §2.6).
CLIENT_ENV = {
    "HF_HUB_DISABLE_XET": "1",
    "HF_UPDATE_DOWNLOAD_COUNTS": "0",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "NO_COLOR": "1",  # else huggingface_hub asks /api/agent-harnesses for colour hints
}
_URL_NAMES = ("ENDPOINT", "HF_ENDPOINT", "HUGGINGFACE_CO_URL_TEMPLATE", "HUB_DATASETS_URL")
_CLIENT_PACKAGES = ("huggingface_hub", "transformers", "datasets")


@contextlib.contextmanager
def use_endpoint(
    endpoint: str, *, cache_dir: Path | None = None, token: str | None = None
) -> Iterator[None]:
    """Point huggingface_hub, transformers and datasets in this process at `endpoint`.

    These libraries read HF_ENDPOINT once, at import, and copy it around. This sets the env
    vars (for subprocesses and later imports) and rewrites every copy already made: each
    loaded module's endpoint-derived strings, the Hub host/origin allow-lists used to follow
    redirects, the shared `HfApi` instance and cached `HfFileSystem` instances. Offline mode
    is turned off in-process, and `datasets` loses its two outside lookups. Everything is
    restored on exit. `cache_dir`, if given, replaces the Hub download cache (a fresh cache
    makes the request log complete: no cache hit hides a request). `token`, if given, becomes
    HF_TOKEN (a loopback Hub's write token: `HubServer.token`).
    """
    from urllib.parse import urlsplit

    from huggingface_hub import constants, hf_api
    from huggingface_hub.hf_file_system import HfFileSystem
    from huggingface_hub.utils import _http

    # Imported first, not left to later: USE_PARQUET_EXPORT has no env var, and a copy of
    # HF_ENDPOINT made after the env is set would escape the restore below.
    datasets_config = (
        importlib.import_module("datasets.config") if importlib.util.find_spec("datasets") else None
    )
    endpoint = endpoint.rstrip("/")
    old = constants.ENDPOINT
    undo: list[tuple[object, str, object]] = []

    def patch(obj: object, name: str, value: object) -> None:
        undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    env = {**CLIENT_ENV, "HF_ENDPOINT": endpoint}
    if cache_dir is not None:
        env["HF_HUB_CACHE"] = str(cache_dir)
    if token is not None:
        env["HF_TOKEN"] = token
    saved_env = {k: os.environ.get(k) for k in [*env, "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"]}
    os.environ.update(env)
    os.environ.pop("HF_HUB_OFFLINE", None)
    os.environ.pop("TRANSFORMERS_OFFLINE", None)
    try:
        for module in [
            m for n, m in list(sys.modules.items()) if n.split(".")[0] in _CLIENT_PACKAGES
        ]:
            names = vars(module) if module is not None else {}
            for name in _URL_NAMES:
                value = names.get(name)
                if isinstance(value, str) and value.startswith(old):
                    patch(module, name, endpoint + value[len(old) :])
            # shared HfApi instances (huggingface_hub's `api`, transformers' `_hf_api`) keep the
            # endpoint of the moment they were made: maybe an earlier loopback Hub, long gone
            for value in list(names.values()):
                if isinstance(value, hf_api.HfApi):
                    patch(value, "endpoint", endpoint)
        patch(constants, "HF_URL_HOSTS", constants.HF_URL_HOSTS | {urlsplit(endpoint).hostname})
        patch(_http, "_HUB_ORIGINS", _http._HUB_ORIGINS | {_http._url_origin(endpoint)})
        patch(constants, "HF_HUB_OFFLINE", False)
        patch(constants, "HF_HUB_DISABLE_XET", True)
        patch(constants, "HF_HUB_DISABLE_TELEMETRY", True)
        if cache_dir is not None:
            patch(constants, "HF_HUB_CACHE", str(cache_dir))
        if datasets_config is not None:
            patch(datasets_config, "USE_PARQUET_EXPORT", False)  # §2.6
            patch(datasets_config, "HF_UPDATE_DOWNLOAD_COUNTS", False)
            patch(datasets_config, "HF_HUB_OFFLINE", False)
        HfFileSystem.clear_instance_cache()  # instances keep the endpoint they were made with
        yield
    finally:
        for obj, name, value in reversed(undo):
            setattr(obj, name, value)
        HfFileSystem.clear_instance_cache()
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _quiet_progress() -> Iterator[None]:
    """No "Fetching N files" bars for a handful of config files: CLI output stays one line."""
    from huggingface_hub.utils import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            enable_progress_bars()


def _first_line(e: BaseException) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)


def _cause(e: BaseException) -> str:
    while e.__cause__ is not None:
        e = e.__cause__
    return f"{type(e).__name__}: {_first_line(e)}"
