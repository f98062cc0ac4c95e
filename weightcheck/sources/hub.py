"""Hub sources through huggingface_hub: config into the HF cache, tensor headers by Range reads.

What one ``open_hub`` does (online):
  1. the model info with file metadata (the GET ``HfApi.model_info(repo, revision,
     files_metadata=True)`` makes, through huggingface_hub's session and error mapping, without
     importing hf_api): the resolved commit sha, the file list, sizes and LFS sha256 content
     hashes (used by ``compare`` to decide identity).
  2. then at once, on threads: ``hf_hub_download`` of config.json (and of the shard index, if
     any) at that commit, into the normal HF cache, so later runs and HF_HUB_OFFLINE=1 find them;
     and for each safetensors file a Range read of its first 4 KiB, and a second one for the rest
     of the header only if it is longer; the weights are never downloaded. Headers are validated
     as strictly as local ones (weightcheck/storage/header.py) and kept in a small header cache
     (``$HF_HOME/weightcheck``, or ``$WEIGHTCHECK_CACHE``) keyed by commit, so offline mode works
     for any repo inspected before. An error is the one these reads one after the other would
     give first.

Environment honoured at call time (not import time): HF_ENDPOINT, HF_TOKEN (or --token),
HF_HUB_OFFLINE, HF_HOME, HF_HUB_CACHE, HF_HUB_DOWNLOAD_TIMEOUT.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

from weightcheck.errors import WeightcheckError
from weightcheck.record import record
from weightcheck.sources import layout
from weightcheck.sources.base import (
    MAX_CONFIG_BYTES,
    MAX_INDEX_BYTES,
    Source,
    WeightFile,
    add_safetensors_file,
    finish_index,
    parse_index,
    parse_json,
    read_config,
)
from weightcheck.sources.pickled import add_pickled_file
from weightcheck.storage.header import parse_header, read_header_length

FIRST_READ = 4096  # bytes read first; a drafter header is ~2 KB
BODY_ATTEMPTS = 4  # a Range read whose connection drops mid-body is tried this many times
# requests in flight at once for one source (config.json, the index, the files' headers)
_THREADS = 8


def _truthy(v: str | None) -> bool:
    return (v or "").strip().upper() in ("1", "ON", "YES", "TRUE")


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def offline() -> bool:
    return _truthy(os.environ.get("HF_HUB_OFFLINE"))


def hf_home() -> str:
    return os.path.expanduser(
        os.environ.get("HF_HOME") or os.path.join("~", ".cache", "huggingface")
    )


def hub_cache() -> str:
    return os.path.expanduser(os.environ.get("HF_HUB_CACHE") or os.path.join(hf_home(), "hub"))


def our_cache() -> str:
    return os.path.expanduser(
        os.environ.get("WEIGHTCHECK_CACHE") or os.path.join(hf_home(), "weightcheck")
    )


def timeout() -> float:
    try:
        return float(os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT") or 10)
    except ValueError:
        return 10.0


_INT_VARS = ("HF_HUB_DOWNLOAD_TIMEOUT", "HF_HUB_ETAG_TIMEOUT")


def _hf():
    """Import huggingface_hub, turning what its import-time configuration refuses into one line.

    huggingface_hub 2.4 reads HF_HUB_DOWNLOAD_TIMEOUT / HF_HUB_ETAG_TIMEOUT with ``int()`` when it
    is imported: "0.5" makes the import itself raise ValueError. It also logs every retry as a
    WARNING on stderr, which would break the CLI's one-line-on-stderr promise: retries stay silent
    unless HF_HUB_VERBOSITY asks for them.
    """
    try:
        import huggingface_hub
        import huggingface_hub.constants  # noqa: F401  (the package itself imports lazily)

        # what a Hub source uses, and nothing more (not hf_api: it costs more than all of this),
        # imported here, before any read runs on a thread: threads never import at once
        import huggingface_hub.file_download  # noqa: F401
        import huggingface_hub.utils  # noqa: F401
    except ValueError as e:
        bad = [
            v
            for v in _INT_VARS
            if os.environ.get(v) is not None and not os.environ[v].strip().isdigit()
        ]
        what = " and ".join(f"{v}={os.environ[v]!r}" for v in bad) or "an HF_* variable"
        raise WeightcheckError(
            None, f"{what}: huggingface_hub only accepts a whole number of seconds ({e})"
        ) from None
    if not os.environ.get("HF_HUB_VERBOSITY"):
        import logging

        logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    return huggingface_hub


# a git ref name never has these (git check-ref-format); they would also be path components in
# our caches (refs/<revision>)
_BAD_REVISION = re.compile(r"(^|/)\.\.?(/|$)|^/|/$|//|[\\\x00-\x1f\x7f]")


def check_revision(repo_id: str, revision: str | None) -> None:
    if revision is not None and (not revision or _BAD_REVISION.search(revision)):
        raise WeightcheckError(
            f"{repo_id}@{revision}",
            "not a valid revision (a branch, tag or "
            "commit name has no '.', '..' or empty "
            "path components): refused",
        )


def _token(token: str | None):
    return token or os.environ.get("HF_TOKEN") or None


def _first_line(e: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters), or its type's name."""
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def _net_error(where: str, e: Exception) -> WeightcheckError:
    """Turn any huggingface_hub / HTTP exception into one clear line."""
    from huggingface_hub import errors as hf_errors

    name = type(e).__name__
    if isinstance(e, hf_errors.HFValidationError):
        return WeightcheckError(where, f"not a valid Hub repo id: {_first_line(e)}")
    if isinstance(e, hf_errors.GatedRepoError):
        return WeightcheckError(
            where,
            "gated repository: accept its terms on the Hub, then pass --token or set HF_TOKEN",
        )
    if isinstance(e, hf_errors.RepositoryNotFoundError):
        return WeightcheckError(
            where, "repository not found on the Hub (or private: pass --token or set HF_TOKEN)"
        )
    if isinstance(e, hf_errors.RevisionNotFoundError):
        return WeightcheckError(where, "revision not found on the Hub")
    if isinstance(e, hf_errors.EntryNotFoundError):
        return WeightcheckError(where, "file not found in the repository")
    if isinstance(e, hf_errors.OfflineModeIsEnabled):
        return WeightcheckError(where, "HF_HUB_OFFLINE is set and this is not in the cache")
    if isinstance(e, hf_errors.HfHubHTTPError):
        status = getattr(getattr(e, "response", None), "status_code", "?")
        return WeightcheckError(where, f"Hub request failed (HTTP {status})")
    if "Timeout" in name:
        return WeightcheckError(
            where,
            f"timed out talking to {endpoint()} ({name}; HF_HUB_DOWNLOAD_TIMEOUT sets the limit)",
        )
    return WeightcheckError(where, f"cannot reach {endpoint()}: {name}: {_first_line(e)}")


@record
class HubRepo:
    repo_id: str
    revision: str | None
    commit: str | None
    token: str | None

    @property
    def where(self) -> str:
        return f"{self.repo_id}@{self.revision}" if self.revision else self.repo_id

    def url(self, fname: str) -> str:
        return f"{endpoint()}/{self.repo_id}/resolve/{self.commit}/{urllib.parse.quote(fname)}"

    def download(self, fname: str) -> str:
        """The whole file, through huggingface_hub's cache (used only when bytes are needed)."""
        _hf()
        from huggingface_hub.file_download import hf_hub_download

        try:
            return hf_hub_download(
                self.repo_id,
                fname,
                revision=self.commit or self.revision,
                cache_dir=hub_cache(),
                token=_token(self.token),
                endpoint=endpoint(),
                local_files_only=offline(),
            )
        except Exception as e:
            raise _net_error(f"{self.where}/{fname}", e) from None

    # -- headers ------------------------------------------------------------------------------
    def _header_cache_path(self, fname: str) -> str:
        return os.path.join(
            our_cache(),
            "headers",
            self.repo_id.replace("/", "--"),
            self.commit,
            fname.replace("/", "--"),
        )

    def read_range(self, fname: str, start: int, end: int) -> tuple[bytes, int | None]:
        """Bytes [start, end) of a file, and the file's total size if the server says it.

        huggingface_hub's backoff retries a failed request (5xx, timeout, refused connection); a
        connection dropped while the body is read is retried here: an error raised inside
        ``http_stream_backoff``'s ``with`` block would be thrown into its retry loop, which then
        fails with "generator didn't stop after throw()".
        """
        _hf()
        from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_stream_backoff

        try:
            import httpx2 as httpx
        except ImportError:  # pragma: no cover - huggingface_hub < 2 used httpx
            import httpx

        headers = build_hf_headers(token=_token(self.token))
        headers["Range"] = f"bytes={start}-{end - 1}"
        where = f"{self.where}/{fname}"
        want = end - start
        wait = 0.5
        for attempt in range(1, BODY_ATTEMPTS + 1):
            dropped = None
            try:
                with http_stream_backoff(
                    "GET",
                    self.url(fname),
                    headers=headers,
                    timeout=timeout(),
                    max_retries=3,
                    base_wait_time=0.5,
                    max_wait_time=4,
                ) as r:
                    hf_raise_for_status(r)
                    total = None
                    cr = r.headers.get("Content-Range", "")
                    m = re.match(r"bytes \d+-\d+/(\d+)", cr)
                    if m:
                        total = int(m.group(1))
                    buf = bytearray()
                    skip = start if r.status_code == 200 else 0  # a server that ignored Range
                    try:
                        for chunk in r.iter_bytes():
                            if skip:
                                cut = min(skip, len(chunk))
                                chunk, skip = chunk[cut:], skip - cut
                            buf += chunk
                            if len(buf) >= want:
                                break
                    except httpx.TransportError as e:  # reset / timeout in the middle of the body
                        dropped = e
                    else:
                        return bytes(buf[:want]), total
            except WeightcheckError:
                raise
            except Exception as e:
                raise _net_error(where, e) from None
            if attempt < BODY_ATTEMPTS:
                time.sleep(wait)
                wait = min(4.0, wait * 2)
        if "Timeout" in type(dropped).__name__:
            raise _net_error(where, dropped)
        raise WeightcheckError(
            where,
            f"connection to {endpoint()} dropped while reading, "
            f"{BODY_ATTEMPTS} times ({type(dropped).__name__}: "
            f"{_first_line(dropped)})",
        )

    def header_bytes(self, fname: str, size: int | None) -> bytes:
        """8-byte length + header JSON, from our cache or two Range reads at most."""
        cache = self._header_cache_path(fname) if self.commit else None
        if cache and os.path.isfile(cache):
            with open(cache, "rb") as f:
                return f.read()
        if offline():
            local = _hf_cached_file(self.repo_id, self.commit, fname)
            if local:
                with open(local, "rb") as f:
                    first8 = f.read(8)
                    return first8 + f.read(read_header_length(first8, f"{self.where}/{fname}"))
            raise WeightcheckError(
                f"{self.where}/{fname}",
                "HF_HUB_OFFLINE is set and this file's "
                "header is not in the cache (inspect it once online)",
            )
        where = f"{self.where}/{fname}"
        first, total = self.read_range(fname, 0, FIRST_READ if not size else min(FIRST_READ, size))
        n = read_header_length(first[:8], where, size or total)
        raw = first[8 : 8 + n]
        if len(raw) < n:
            more, _ = self.read_range(fname, 8 + len(raw), 8 + n)
            raw += more
            if len(raw) < n:
                raise WeightcheckError(where, f"header cut short: got {len(raw)} of {n} bytes")
        blob = first[:8] + raw
        if cache:
            _atomic_write(cache, blob)
        return blob


def _atomic_write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _repo_folder(repo_id: str) -> str:
    return os.path.join(hub_cache(), "models--" + repo_id.replace("/", "--"))


def _hf_cached_file(repo_id: str, commit: str | None, fname: str) -> str | None:
    if not commit:
        return None
    p = os.path.join(_repo_folder(repo_id), "snapshots", commit, *fname.split("/"))
    return p if os.path.isfile(p) else None


def _resolve_offline(repo_id: str, revision: str | None) -> str:
    rev = revision or "main"
    if re.fullmatch(r"[0-9a-f]{40}", rev):
        return rev
    for refs in (
        os.path.join(our_cache(), "refs", repo_id.replace("/", "--"), rev),
        os.path.join(_repo_folder(repo_id), "refs", rev),
    ):
        if os.path.isfile(refs):
            with open(refs) as f:
                sha = f.read().strip()
            if re.fullmatch(r"[0-9a-f]{40}", sha):
                return sha
    raise WeightcheckError(
        f"{repo_id}@{rev}", "HF_HUB_OFFLINE is set and this repo/revision is not in the cache"
    )


def _manifest_path(repo_id: str, commit: str) -> str:
    return os.path.join(our_cache(), "manifests", repo_id.replace("/", "--"), commit + ".json")


def _siblings_offline(repo: HubRepo) -> list[dict]:
    """The file list of a repo/revision read before: our manifest, else the HF cache snapshot."""
    repo.commit = _resolve_offline(repo.repo_id, repo.revision)
    mpath = _manifest_path(repo.repo_id, repo.commit)
    if os.path.isfile(mpath):
        with open(mpath) as f:
            return json.load(f)["siblings"]
    snap = os.path.join(_repo_folder(repo.repo_id), "snapshots", repo.commit)
    if not os.path.isdir(snap):
        raise WeightcheckError(
            repo.where, "HF_HUB_OFFLINE is set and this repo/revision is not in the cache"
        )
    return [
        {
            "name": os.path.relpath(os.path.join(d, n), snap).replace(os.sep, "/"),
            "size": os.path.getsize(os.path.join(d, n)),
            "sha256": None,
        }
        for d, _, ns in os.walk(snap)
        for n in ns
    ]


def _model_info(repo: HubRepo) -> dict:
    """The Hub's model info with file metadata (``HfApi.model_info(files_metadata=True)``: the
    same GET, made with huggingface_hub's session, headers and error mapping, without importing
    hf_api, which costs more than everything else a Hub source needs)."""
    from huggingface_hub.utils import (
        build_hf_headers,
        get_session,
        hf_raise_for_status,
        validate_repo_id,
    )

    url = f"{endpoint()}/api/models/{repo.repo_id}"
    if repo.revision is not None:
        url += f"/revision/{urllib.parse.quote(repo.revision, safe='')}"
    validate_repo_id(repo.repo_id)
    r = get_session().get(
        url,
        headers=build_hf_headers(token=_token(repo.token)),
        timeout=timeout(),
        params={"blobs": True},
    )
    hf_raise_for_status(r)
    info = r.json()
    if not isinstance(info, dict):
        raise TypeError(f"the model info is a JSON {type(info).__name__}, not an object")
    return info


def _sibling(s) -> dict:
    if not isinstance(s, dict) or not isinstance(s.get("rfilename"), str):
        raise TypeError(f"a malformed file entry in the model info: {str(s)[:80]}")
    lfs = s.get("lfs")
    sha = lfs.get("sha256") if isinstance(lfs, dict) else None
    return {"name": s["rfilename"], "size": s.get("size"), "sha256": sha}


def _siblings_online(repo: HubRepo) -> list[dict]:
    """The resolved commit (into ``repo.commit``) and the file list, sizes and LFS sha256 hashes;
    kept in our cache (manifest and ref) for offline runs."""
    try:
        info = _model_info(repo)
        commit = info.get("sha")
        siblings = [_sibling(s) for s in info.get("siblings") or []]
    except Exception as e:
        raise _net_error(repo.where, e) from None
    repo.commit = commit
    if commit is not None and not re.fullmatch(r"[0-9a-f]{40}", str(commit)):
        # it names folders in our cache: never let a server choose a path
        raise WeightcheckError(
            repo.where, f"the Hub answered a malformed commit sha {str(commit)[:60]!r}: refused"
        )
    if commit:
        _atomic_write(
            _manifest_path(repo.repo_id, commit),
            json.dumps({"revision": repo.revision, "siblings": siblings}).encode(),
        )
        _atomic_write(
            os.path.join(
                our_cache(), "refs", repo.repo_id.replace("/", "--"), repo.revision or "main"
            ),
            commit.encode(),
        )
    return siblings


def _check_size(where: str, what: str, size, limit: int) -> None:
    if (size or 0) > limit:  # known before download
        raise WeightcheckError(where, f"{what} is {size} bytes, more than the {limit} we accept")


def _config(repo: HubRepo) -> dict:
    """config.json, downloaded into the HF cache and read."""
    where = f"{repo.where}/config.json"
    path = repo.download("config.json")
    if os.path.getsize(path) > MAX_CONFIG_BYTES:
        raise WeightcheckError(where, "config.json is larger than we accept")
    return read_config(path)


def _index(repo: HubRepo, by_name: dict, index_name: str, only) -> tuple[dict, dict, list]:
    """The shard index: (its JSON, the weight map, the shards to read)."""
    where = f"{repo.where}/{index_name}"
    _check_size(where, "index", by_name[index_name].get("size"), MAX_INDEX_BYTES)
    ipath = repo.download(index_name)
    if os.path.getsize(ipath) > MAX_INDEX_BYTES:
        raise WeightcheckError(where, "index is larger than we accept")
    with open(ipath, "rb") as f:
        obj = parse_json(f.read(), where, "index")
    weight_map = parse_index(obj, where)
    fnames = layout.shards(weight_map, only)
    for f in fnames:
        layout.check_member(f, where, "the repository")
        if f not in by_name:
            raise WeightcheckError(
                where, f"index names shard {f!r}, which is not in the repository"
            )
    return obj, weight_map, fnames


def _weight_file(repo: HubRepo, by_name: dict, fname: str) -> tuple[WeightFile, object]:
    """A weight file: (its WeightFile, its parsed header) for safetensors (two Range reads at
    most), (its WeightFile downloaded, None) for a pickle."""
    s = by_name.get(fname, {})
    fmt = "safetensors" if fname.endswith(".safetensors") else "pickle"
    wf = WeightFile(
        name=fname, format=fmt, url=repo.url(fname), size=s.get("size"), sha256=s.get("sha256")
    )
    if fmt == "pickle":
        wf.local_path = repo.download(fname)
        return wf, None
    blob = repo.header_bytes(fname, wf.size)
    return wf, parse_header(blob[8:], f"{repo.where}/{fname}", wf.size)


def open_hub(
    spec: str,
    repo_id: str,
    revision: str | None,
    token: str | None,
    only: set[str] | None = None,
    config_only: bool = False,
) -> Source:
    """A Hub repo as a Source: the file list (one request), then at once, on threads, config.json
    and the index (when sharded) and then every weight file's header. An error is the one the
    reads one after the other would give first: config.json's, then the layout's, the index's,
    the files' in order."""
    check_revision(repo_id, revision)
    repo = HubRepo(repo_id, revision, None, token)
    if offline():
        siblings = _siblings_offline(repo)
    else:
        _hf()
        siblings = _siblings_online(repo)
    src = Source(
        spec=spec,
        kind="hub",
        location=repo_id,
        revision=revision or "main",
        commit=repo.commit,
        hub=repo,
    )
    by_name = {s["name"]: s for s in siblings}
    src.listing = tuple(sorted(n for n in by_name if "/" not in n))
    if "config.json" in by_name:
        where = f"{repo.where}/config.json"
        size = by_name["config.json"].get("size")
        _check_size(where, "config.json", size, MAX_CONFIG_BYTES)
    with ThreadPoolExecutor(max_workers=_THREADS) as pool:
        config = pool.submit(_config, repo) if "config.json" in by_name else None
        try:
            chosen = layout.choose([n for n in sorted(by_name) if "/" not in n])
            if chosen is None and config_only and config is not None:
                src.config = config.result()  # a target's config is all --target needs
                src.config_file = f"{repo.where}/config.json"
                src.layout = "config only"
                return src
            if chosen is None:
                raise layout.not_a_checkpoint(repo.where)
            src.layout, fnames, index_name = chosen.kind, list(chosen.files), chosen.index
            weight_map = None
            if index_name:
                src.index, weight_map, fnames = _index(repo, by_name, index_name, only)
                src.index_file = f"{repo.where}/{index_name}"
            files = [pool.submit(_weight_file, repo, by_name, f) for f in fnames]
        except WeightcheckError:
            if config is not None:
                config.result()  # read first: its error first
            raise
        if config is not None:
            src.config = config.result()
            src.config_file = f"{repo.where}/config.json"
        for read in files:
            wf, header = read.result()
            if header is None:
                add_pickled_file(src, wf)
            else:
                add_safetensors_file(src, wf, header)
    finish_index(src, weight_map, index_name, only)
    return src
