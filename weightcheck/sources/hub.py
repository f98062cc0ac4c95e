"""Hub sources through huggingface_hub: config into the HF cache, tensor headers by Range reads.

What one ``open_hub`` does (online):
  1. ``HfApi.model_info(repo, revision, files_metadata=True)``: the resolved commit sha, the file
     list, sizes and LFS sha256 content hashes (used by ``compare`` to decide identity).
  2. ``hf_hub_download`` of config.json (and the shard index, if any) at that commit: the normal
     HF cache, so later runs and HF_HUB_OFFLINE=1 find them.
  3. For each safetensors file: a Range read of its first 4 KiB, and a second one for the rest of
     the header only if it is longer; the weights are never downloaded. Headers are validated as
     strictly as local ones (weightcheck/storage/header.py) and kept in a small header cache
     (``$HF_HOME/weightcheck``, or ``$WEIGHTCHECK_CACHE``) keyed by commit, so offline mode works
     for any repo inspected before.

Environment honoured at call time (not import time): HF_ENDPOINT, HF_TOKEN (or --token),
HF_HUB_OFFLINE, HF_HOME, HF_HUB_CACHE, HF_HUB_DOWNLOAD_TIMEOUT.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
from dataclasses import dataclass

from weightcheck.errors import WeightcheckError
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


@dataclass
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
        from huggingface_hub import hf_hub_download

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


def open_hub(
    spec: str,
    repo_id: str,
    revision: str | None,
    token: str | None,
    only: set[str] | None = None,
    config_only: bool = False,
) -> Source:
    check_revision(repo_id, revision)
    repo = HubRepo(repo_id, revision, None, token)
    where = repo.where
    if offline():
        repo.commit = _resolve_offline(repo_id, revision)
        mpath = _manifest_path(repo_id, repo.commit)
        if os.path.isfile(mpath):
            with open(mpath) as f:
                siblings = json.load(f)["siblings"]
        else:
            snap = os.path.join(_repo_folder(repo_id), "snapshots", repo.commit)
            if not os.path.isdir(snap):
                raise WeightcheckError(
                    where, "HF_HUB_OFFLINE is set and this repo/revision is not in the cache"
                )
            siblings = [
                {
                    "name": os.path.relpath(os.path.join(d, n), snap).replace(os.sep, "/"),
                    "size": os.path.getsize(os.path.join(d, n)),
                    "sha256": None,
                }
                for d, _, ns in os.walk(snap)
                for n in ns
            ]
    else:
        _hf()
        from huggingface_hub import HfApi

        try:
            info = HfApi(endpoint=endpoint(), token=_token(token)).model_info(
                repo_id, revision=revision, files_metadata=True, timeout=timeout()
            )
        except Exception as e:
            raise _net_error(where, e) from None
        repo.commit = info.sha
        if repo.commit is not None and not re.fullmatch(r"[0-9a-f]{40}", str(repo.commit)):
            # it names folders in our cache: never let a server choose a path
            raise WeightcheckError(
                where, f"the Hub answered a malformed commit sha {str(repo.commit)[:60]!r}: refused"
            )
        siblings = []
        for s in info.siblings or []:
            lfs = getattr(s, "lfs", None)
            sha = getattr(lfs, "sha256", None) if lfs is not None else None
            if sha is None and isinstance(lfs, dict):
                sha = lfs.get("sha256")
            siblings.append({"name": s.rfilename, "size": s.size, "sha256": sha})
        if repo.commit:
            _atomic_write(
                _manifest_path(repo_id, repo.commit),
                json.dumps({"revision": revision, "siblings": siblings}).encode(),
            )
            _atomic_write(
                os.path.join(our_cache(), "refs", repo_id.replace("/", "--"), revision or "main"),
                repo.commit.encode(),
            )

    src = Source(
        spec=spec,
        kind="hub",
        location=repo_id,
        revision=revision or "main",
        commit=repo.commit,
        hub=repo,
    )
    by_name = {s["name"]: s for s in siblings}
    names = sorted(by_name)

    if "config.json" in by_name:
        if (by_name["config.json"].get("size") or 0) > MAX_CONFIG_BYTES:  # known before download
            raise WeightcheckError(
                f"{where}/config.json",
                f"config.json is "
                f"{by_name['config.json']['size']} bytes, more than the "
                f"{MAX_CONFIG_BYTES} we accept",
            )
        path = repo.download("config.json")
        if os.path.getsize(path) > MAX_CONFIG_BYTES:
            raise WeightcheckError(f"{where}/config.json", "config.json is larger than we accept")
        src.config = read_config(path)
        src.config_file = f"{where}/config.json"

    def weight_file(fname, fmt):
        s = by_name.get(fname, {})
        return WeightFile(
            name=fname, format=fmt, url=repo.url(fname), size=s.get("size"), sha256=s.get("sha256")
        )

    chosen = layout.choose([n for n in names if "/" not in n])
    if chosen is None and config_only and src.config is not None:
        src.layout = "config only"
        return src
    if chosen is None:
        raise layout.not_a_checkpoint(where)
    src.layout, fnames, index_name = chosen.kind, list(chosen.files), chosen.index
    weight_map = None
    if index_name:
        if (by_name[index_name].get("size") or 0) > MAX_INDEX_BYTES:
            raise WeightcheckError(
                f"{where}/{index_name}",
                f"index is {by_name[index_name]['size']} bytes, more than the "
                f"{MAX_INDEX_BYTES} we accept",
            )
        ipath = repo.download(index_name)
        if os.path.getsize(ipath) > MAX_INDEX_BYTES:
            raise WeightcheckError(f"{where}/{index_name}", "index is larger than we accept")
        with open(ipath, "rb") as f:
            obj = parse_json(f.read(), f"{where}/{index_name}", "index")
        weight_map = parse_index(obj, f"{where}/{index_name}")
        src.index, src.index_file = obj, f"{where}/{index_name}"
        fnames = layout.shards(weight_map, only)
        for f in fnames:
            layout.check_member(f, f"{where}/{index_name}", "the repository")
            if f not in by_name:
                raise WeightcheckError(
                    f"{where}/{index_name}",
                    f"index names shard {f!r}, which is not in the repository",
                )
    for f in fnames:
        if f.endswith(".safetensors"):
            wf = weight_file(f, "safetensors")
            blob = repo.header_bytes(f, wf.size)
            header = parse_header(blob[8:], f"{where}/{f}", wf.size)
            add_safetensors_file(src, wf, header)
        else:
            wf = weight_file(f, "pickle")
            wf.local_path = repo.download(f)
            add_pickled_file(src, wf)
    finish_index(src, weight_map, index_name, only)
    return src
