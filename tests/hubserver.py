"""A tiny, stdlib-only, Hugging Face Hub-compatible HTTP server for offline tests.

The REAL ``huggingface_hub`` client (2.4.0) talks to it over HTTP on 127.0.0.1; nothing in
``huggingface_hub`` is mocked. It implements the endpoints the client calls for ``model_info``,
``hf_hub_download`` (HEAD-then-GET metadata flow), ``get_safetensors_metadata`` (Range GETs),
``file_exists``, ``list_repo_files`` / ``list_repo_tree``, ``get_paths_info`` and ``list_repo_refs``,
with the headers and error codes of the real Hub, plus byte accounting and fault injection.

Pointing the client at it
-------------------------
``huggingface_hub`` reads ``HF_ENDPOINT``, ``HF_HOME``, ``HF_HUB_OFFLINE``, ``HF_HUB_ETAG_TIMEOUT`` and
``HF_HUB_DOWNLOAD_TIMEOUT`` ONCE, when ``huggingface_hub.constants`` is imported; the module-level
functions (``huggingface_hub.model_info``, ``huggingface_hub.get_safetensors_metadata``...) are bound
to an ``HfApi()`` built at import time. So:

* subprocess (most robust, what a CLI test should do): ``env=hf_env(server, hf_home)``;
* in-process: ``patch_hf_hub(monkeypatch, server.url, hf_home)`` (see its docstring), or pass
  ``endpoint=server.url`` / ``cache_dir=...`` explicitly to ``HfApi`` / ``hf_hub_download``.

Served routes (``{type}`` is ``models``, ``datasets`` or ``spaces``)::

    GET  /api/{type}/{repo_id}                      repo info at the default branch ("main")
    GET  /api/{type}/{repo_id}/revision/{rev}       repo info at a revision (?blobs=true => sizes, lfs)
    GET  /api/{type}/{repo_id}/tree/{rev}[/{path}]  list_repo_tree / list_repo_files (?recursive=true)
    POST /api/{type}/{repo_id}/paths-info/{rev}     get_paths_info (form: paths=..&expand=..)
    GET  /api/{type}/{repo_id}/refs                 list_repo_refs
    HEAD|GET /[datasets/|spaces/]{repo_id}/resolve/{rev}/{path}   file metadata / content (Range)
    HEAD|GET /__cdn__/{sha256}?repo=..&path=..      "CDN" blob store (target of redirect_resolves_to)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import struct
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import parse_qs, quote, unquote, urlencode

__all__ = ["HubServer", "RequestRecord", "hf_env", "patch_hf_hub", "LFS_SUFFIXES"]

#: Files whose name ends with one of these are served as Git LFS files (sha256 ETag, X-Linked-*).
LFS_SUFFIXES: tuple[str, ...] = (".safetensors", ".bin", ".pt")

_CHUNK = 64 * 1024
_REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
_URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_API_KEYWORDS = {
    "revision",
    "tree",
    "paths-info",
    "refs",
    "resolve",
    "commits",
    "safetensors-metadata",
}
_SHA1_RE = re.compile(r"[0-9a-f]{40}")
_RANGE_RE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", re.IGNORECASE)


# --------------------------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------------------------


@dataclass(eq=False)
class RequestRecord:
    """One request, as seen by the server. Appended to ``HubServer.requests`` when the request arrives (so the log
    is in arrival order) and updated while it is answered: ``status`` stays 0 until the response headers are sent
    (e.g. during a stall) and ``body_bytes`` grows as the body is written."""

    method: str
    path: str  # request path as sent (percent-encoded), without the query string
    query: str
    range: str | None  # the Range request header, if any
    status: int
    body_bytes: int  # response body bytes actually written to the socket
    authorization: str | None  # the Authorization request header, if any
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    arrived: float = 0.0  # time.monotonic() when the request arrived
    answered: float = 0.0  # ... when its answer was written (0: not yet)


@dataclass
class _Blob:
    size: int
    sha256: str
    git_sha1: str  # git blob oid of the content
    data: bytes | None = None
    path: Path | None = None  # big files are streamed from disk, never loaded

    def iter_range(self, start: int, end: int) -> Iterator[bytes]:
        """Yield bytes [start, end] (inclusive) in chunks."""
        remaining = end - start + 1
        if remaining <= 0:
            return
        if self.data is not None:
            for off in range(start, end + 1, _CHUNK):
                yield self.data[off : min(off + _CHUNK, end + 1)]
            return
        assert self.path is not None
        with open(self.path, "rb") as f:
            f.seek(start)
            while remaining > 0:
                chunk = f.read(min(_CHUNK, remaining))
                if not chunk:
                    break
                remaining -= len(chunk)
                yield chunk

    def read_prefix(self, n: int) -> bytes:
        return b"".join(self.iter_range(0, min(n, self.size) - 1))


@dataclass
class _File:
    path: str
    blob: _Blob
    lfs: bool

    @property
    def pointer(self) -> bytes:
        return (
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.blob.sha256}\nsize {self.blob.size}\n"
        ).encode()

    @property
    def oid(self) -> str:
        """Git blob oid as the Hub reports it (the pointer's oid for LFS files)."""
        return _git_blob_sha1(self.pointer) if self.lfs else self.blob.git_sha1


@dataclass
class _Commit:
    sha: str
    files: dict[str, _File]
    parent: str | None
    title: str
    date: str


@dataclass
class _Repo:
    repo_type: str
    repo_id: str
    private: bool = False
    gated: Any = False  # False | "auto" | "manual"
    commits: dict[str, _Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    created_at: str = ""
    default_branch: str = "main"

    def resolve(self, revision: str) -> _Commit | None:
        rev = revision
        for prefix in ("refs/heads/", "refs/tags/"):
            if rev.startswith(prefix):
                rev = rev[len(prefix) :]
        sha = self.branches.get(rev) or self.tags.get(rev)
        if sha is None and _SHA1_RE.fullmatch(revision) and revision in self.commits:
            sha = revision
        return self.commits.get(sha) if sha else None


def _git_blob_sha1(data: bytes) -> str:
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def _blob_from(source: bytes | bytearray | memoryview | str | os.PathLike) -> _Blob:
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return _Blob(
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            git_sha1=_git_blob_sha1(data),
            data=data,
        )
    if isinstance(source, str):
        raise TypeError("file content must be bytes or pathlib.Path (str is ambiguous)")
    path = Path(source)
    size = path.stat().st_size
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha256.update(chunk)
            sha1.update(chunk)
    return _Blob(size=size, sha256=sha256.hexdigest(), git_sha1=sha1.hexdigest(), path=path)


def _safetensors_params(blob: _Blob) -> dict[str, int] | None:
    """Parameter count per dtype from a safetensors header (best effort, like the Hub's `safetensors` field)."""
    try:
        if blob.size < 8:
            return None
        (n,) = struct.unpack("<Q", blob.read_prefix(8))
        if n > 25_000_000 or 8 + n > blob.size:
            return None
        header = json.loads(blob.read_prefix(8 + n)[8:])
        out: dict[str, int] = defaultdict(int)
        for name, info in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for d in info["shape"]:
                count *= int(d)
            out[info["dtype"]] += count
        return dict(out)
    except Exception:
        return None


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


# --------------------------------------------------------------------------------------------------
# Fault rules
# --------------------------------------------------------------------------------------------------


@dataclass
class _Rule:
    substring: str
    times: int | None  # None = forever
    method: str | None = None
    value: Any = None  # status (fail), nbytes (reset), seconds (stall)
    extra: Any = None  # stall: after_bytes

    needs_body: bool = False

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method.upper() == method) and self.substring in path


def _take(rules: list[_Rule], method: str, path: str, body: bool = True) -> _Rule | None:
    for rule in rules:
        if rule.matches(method, path) and (body or not rule.needs_body):
            if rule.times is not None:
                rule.times -= 1
                if rule.times <= 0:
                    rules.remove(rule)
            return rule
    return None


# --------------------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    hub: "HubServer"

    def handle_error(self, request, client_address):  # quiet: clients time out / reset on purpose
        pass


class _Reply(Exception):
    """Raised inside a handler to send a short (error) response."""

    def __init__(
        self, status: int, message: str, code: str | None = None, headers: dict | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


class _Abort(Exception):
    """Connection deliberately dropped."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer
    server_version = "hubserver/1.0"

    # ---- quiet ----
    def log_message(self, format, *args):  # noqa: A002
        pass

    def setup(self):
        super().setup()
        self.server.hub._track(self.connection, add=True)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.hub._track(self.connection, add=False)

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (OSError, _Abort):
            self.close_connection = True

    def do_GET(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    # ---- core ----
    def _dispatch(self) -> None:
        hub = self.server.hub
        raw_path, _, query = self.path.partition("?")
        self._raw_path, self._query = raw_path, query
        self._params = {k: v[-1] for k, v in parse_qs(query).items()}
        self._rec = RequestRecord(
            method=self.command,
            path=raw_path,
            query=query,
            range=self.headers.get("Range"),
            status=0,
            body_bytes=0,
            authorization=self.headers.get("Authorization"),
            headers=dict(self.headers.items()),
            arrived=time.monotonic(),
        )
        hub._record(self._rec)
        self._sent = 0
        self._reset_after: int | None = None
        self._stall_after: tuple[int, float] | None = None
        self._count_key: tuple[str, str] | None = None
        length = int(self.headers.get("Content-Length") or 0)
        self._body = self.rfile.read(length) if length else b""
        decoded = unquote(raw_path)
        method = self.command
        try:
            # HEAD responses have no body: body-related rules (reset, stall after n bytes) skip them
            has_body = method != "HEAD"
            if hub.delay > 0:
                hub._stop.wait(hub.delay)
                if hub._stop.is_set():
                    raise _Abort()
            rule = hub._take("stall", method, decoded, body=has_body)
            if rule is not None:
                if rule.extra is None:
                    hub._stop.wait(rule.value)
                    if hub._stop.is_set():
                        raise _Abort()
                else:
                    self._stall_after = (rule.extra, rule.value)
            rule = hub._take("reset", method, decoded, body=has_body)
            if rule is not None:
                self._reset_after = rule.value
            rule = hub._take("fail", method, decoded)
            if rule is not None:
                raise _Reply(
                    rule.value,
                    f"Injected failure ({rule.value})",
                    headers={"X-Injected-Fault": "1"},
                )
            self._route(raw_path)
            self._rec.answered = time.monotonic()
        except _Reply as r:
            self._send_error(r)
        except _Abort:
            self.close_connection = True
        except OSError:
            self.close_connection = True
        except Exception as e:  # a bug in the server: answer 500 instead of hanging the client
            self.close_connection = True
            if self._rec.status == 0:  # headers not sent yet
                try:
                    self._send_error(_Reply(500, f"hubserver internal error: {e!r}"))
                except OSError:
                    pass

    def _route(self, raw_path: str) -> None:
        segs = [unquote(s) for s in raw_path.split("/")[1:]]
        if segs and segs[-1] == "" and len(segs) > 1:
            segs = segs[:-1]
        if len(segs) >= 2 and segs[0] == "api" and segs[1] in _REPO_TYPES:
            self._api(_REPO_TYPES[segs[1]], segs[2:])
        elif len(segs) >= 2 and segs[0] == "__cdn__" and self.command in ("GET", "HEAD"):
            self._cdn(segs[1])
        else:
            repo_type = "model"
            if segs and segs[0] in ("datasets", "spaces"):
                repo_type = _REPO_TYPES[segs[0]]
                segs = segs[1:]
            for n in (1, 2):
                if len(segs) >= n + 3 and segs[n] == "resolve" and self.command in ("GET", "HEAD"):
                    repo_id = "/".join(segs[:n])
                    self._resolve(repo_type, repo_id, segs[n + 1], "/".join(segs[n + 2 :]))
                    return
            raise _Reply(404, "Not Found")

    # ---- helpers ----
    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return None

    def _lookup_repo(self, repo_type: str, repo_id: str) -> _Repo:
        hub = self.server.hub
        repo = hub._repos.get((repo_type, repo_id))
        if repo is None or (repo.private and self._token() not in hub.tokens):
            raise _Reply(
                404,
                "Repository not found",
                "RepoNotFound",
            )
        return repo

    def _check_gate(self, repo: _Repo) -> None:
        if not repo.gated or repo.private:
            return
        token = self._token()
        if token in self.server.hub.tokens:
            return
        kind = repo.repo_type
        if token is None:
            raise _Reply(
                401,
                f"Access to {kind} {repo.repo_id} is restricted. You must have access to it and be authenticated"
                " to access it. Please log in.",
                "GatedRepo",
            )
        raise _Reply(
            403,
            f"Access to {kind} {repo.repo_id} is restricted and you are not in the authorized list. Visit"
            f" {self.server.hub.url}/{repo.repo_id} to ask for access.",
            "GatedRepo",
        )

    def _commit(self, repo: _Repo, revision: str) -> _Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise _Reply(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    def _send_error(self, r: _Reply) -> None:
        body = json.dumps({"error": r.message}).encode()
        headers = {"Content-Type": "application/json; charset=utf-8", "X-Error-Message": r.message}
        if r.code:
            headers["X-Error-Code"] = r.code
        headers.update(r.headers)
        self._start(r.status, headers, len(body))
        self._write(body)
        self._rec.answered = time.monotonic()

    def _start(self, status: int, headers: Mapping[str, str], length: int) -> None:
        self._rec.status = status
        self.send_response(status)
        request_id = (
            self.headers.get("X-Amzn-Trace-Id")
            or self.headers.get("X-Request-Id")
            or str(uuid.uuid4())
        )
        self.send_header("X-Request-Id", request_id)
        for k, v in headers.items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def _write(self, data: bytes) -> None:
        """Write body bytes (never for HEAD), honouring the reset/stall hooks and counting bytes."""
        if self.command == "HEAD" or not data:
            return
        hub = self.server.hub
        view = memoryview(data)
        while True:
            if self._stall_after is not None and self._sent >= self._stall_after[0]:
                self.wfile.flush()
                seconds = self._stall_after[1]
                self._stall_after = None
                hub._stop.wait(seconds)
                if hub._stop.is_set():
                    raise _Abort()
            if self._reset_after is not None and self._sent >= self._reset_after:
                self.wfile.flush()
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                raise _Abort()
            if not len(view):
                return
            n = len(view)
            if self._stall_after is not None:
                n = min(n, self._stall_after[0] - self._sent)
            if self._reset_after is not None:
                n = min(n, self._reset_after - self._sent)
            # count before writing: the client may read the bytes (and the test look at the
            # counters) before this thread runs again after the write
            self._sent += n
            self._rec.body_bytes = self._sent
            hub._count(n, self._count_key)
            self.wfile.write(view[:n])
            view = view[n:]

    def _send_json(self, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps(obj).encode()
        self._start(
            200, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, len(body)
        )
        self._write(body)

    def _send_blob(self, blob: _Blob, headers: dict[str, str], filename: str) -> None:
        headers = dict(headers)
        headers["Accept-Ranges"] = "bytes"
        headers["Content-Type"] = "application/octet-stream"
        base = filename.rsplit("/", 1)[-1]
        headers["Content-Disposition"] = (
            f"inline; filename*=UTF-8''{quote(base)}; filename=\"{base}\";"
        )
        rng = _parse_range(self.headers.get("Range"), blob.size)
        if rng == "unsatisfiable":
            raise _Reply(
                416,
                "Requested Range Not Satisfiable",
                headers={"Content-Range": f"bytes */{blob.size}"},
            )
        if rng is None:
            start, end, status = 0, blob.size - 1, 200
        else:
            start, end = rng
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{blob.size}"
        self._start(status, headers, end - start + 1)
        if self.command == "HEAD":
            return
        for chunk in blob.iter_range(start, end):
            self._write(chunk)

    # ---- routes ----
    def _resolve(self, repo_type: str, repo_id: str, revision: str, path: str) -> None:
        hub = self.server.hub
        with hub._lock:
            repo = self._lookup_repo(repo_type, repo_id)
            self._check_gate(repo)
            commit = self._commit(repo, revision)
            f = commit.files.get(path)
            redirect = hub._redirect_to
        if f is None:
            raise _Reply(
                404, "Entry not found", "EntryNotFound", headers={"X-Repo-Commit": commit.sha}
            )
        headers = {"X-Repo-Commit": commit.sha}
        if f.lfs:
            headers["ETag"] = f'"{f.blob.sha256}"'
            headers["X-Linked-Etag"] = f'"{f.blob.sha256}"'
            headers["X-Linked-Size"] = str(f.blob.size)
        else:
            headers["ETag"] = f'"{f.blob.git_sha1}"'
        if f.lfs and redirect is not None:
            # Like the real Hub sending LFS files to its CDN: absolute Location on another origin. The 302 itself
            # carries X-Repo-Commit / X-Linked-Etag / X-Linked-Size (the client reads metadata from it and does NOT
            # follow cross-origin redirects for HEAD).
            location = redirect._register_cdn_blob(f.blob, repo_id, path)
            headers["ETag"] = f'"{f.oid}"'
            headers["Location"] = location
            self._start(302, headers, 0)
            return
        self._count_key = (repo_id, path)
        self._send_blob(f.blob, headers, path)

    def _cdn(self, sha256: str) -> None:
        hub = self.server.hub
        with hub._lock:
            blob = hub._cdn_blobs.get(sha256)
        if blob is None:
            raise _Reply(404, "NoSuchKey")
        self._count_key = (self._params.get("repo", ""), self._params.get("path", sha256))
        self._send_blob(blob, {"ETag": f'"{sha256}"'}, self._params.get("path", sha256))

    def _api(self, repo_type: str, rest: list[str]) -> None:
        hub = self.server.hub
        if not rest:
            raise _Reply(404, "Not Found")
        with hub._lock:
            if len(rest) >= 2 and (repo_type, f"{rest[0]}/{rest[1]}") in hub._repos:
                n = 2
            elif (repo_type, rest[0]) in hub._repos:
                n = 1
            else:
                n = 2 if len(rest) >= 2 and rest[1] not in _API_KEYWORDS else 1
            repo_id = "/".join(rest[:n])
            sub = rest[n:]
            repo = self._lookup_repo(repo_type, repo_id)
            method = self.command
            if method == "GET" and not sub:
                obj = self._info(repo, self._commit(repo, repo.default_branch))
            elif method == "GET" and len(sub) == 2 and sub[0] == "revision":
                obj = self._info(repo, self._commit(repo, sub[1]))
            elif method == "GET" and len(sub) >= 2 and sub[0] == "tree":
                obj = self._tree(repo, self._commit(repo, sub[1]), "/".join(sub[2:]))
            elif method == "POST" and len(sub) == 2 and sub[0] == "paths-info":
                obj = self._paths_info(repo, self._commit(repo, sub[1]))
            elif method == "GET" and sub == ["refs"]:
                obj = self._refs(repo)
            else:
                raise _Reply(404, "Not Found")
        self._send_json(obj)

    def _info(self, repo: _Repo, commit: _Commit) -> dict:
        blobs = self._params.get("blobs", "").lower() in ("1", "true")
        siblings = []
        for p in sorted(commit.files):
            f = commit.files[p]
            s: dict[str, Any] = {"rfilename": p}
            if blobs:
                s["size"] = f.blob.size
                s["blobId"] = f.oid
                if f.lfs:
                    s["lfs"] = {
                        "sha256": f.blob.sha256,
                        "size": f.blob.size,
                        "pointerSize": len(f.pointer),
                    }
            siblings.append(s)
        params: dict[str, int] = defaultdict(int)
        for p, f in commit.files.items():
            if p.endswith(".safetensors"):
                for dtype, count in (_safetensors_params(f.blob) or {}).items():
                    params[dtype] += count
        info = {
            "_id": hashlib.sha1(f"{repo.repo_type}/{repo.repo_id}".encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0] if "/" in repo.repo_id else None,
            "sha": commit.sha,
            "lastModified": commit.date,
            "createdAt": repo.created_at,
            "private": repo.private,
            "gated": repo.gated,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
            "usedStorage": sum(f.blob.size for f in commit.files.values()),
        }
        if repo.repo_type == "model":
            info["modelId"] = repo.repo_id
            if params:
                info["safetensors"] = {"parameters": dict(params), "total": sum(params.values())}
        info.update(self.server.hub.info_overrides)
        return info

    def _entry(self, commit: _Commit, path: str, expand: bool) -> dict | None:
        f = commit.files.get(path)
        last = {"id": commit.sha, "title": commit.title, "date": commit.date}
        if f is not None:
            e: dict[str, Any] = {"type": "file", "oid": f.oid, "size": f.blob.size, "path": path}
            if f.lfs:
                e["lfs"] = {
                    "oid": f.blob.sha256,
                    "size": f.blob.size,
                    "pointerSize": len(f.pointer),
                }
            if expand:
                e["lastCommit"] = last
            return e
        prefix = path + "/"
        children = sorted((p, c.oid) for p, c in commit.files.items() if p.startswith(prefix))
        if not children:
            return None
        e = {
            "type": "directory",
            "oid": hashlib.sha1(repr(children).encode()).hexdigest(),
            "path": path,
        }
        if expand:
            e["lastCommit"] = last
        return e

    def _tree(self, repo: _Repo, commit: _Commit, path: str) -> list:
        recursive = self._params.get("recursive", "").lower() in ("1", "true")
        expand = self._params.get("expand", "").lower() in ("1", "true")
        prefix = path + "/" if path else ""
        if path and self._entry(commit, path, False) is None:
            raise _Reply(
                404,
                f"Entry not found: {path}",
                "EntryNotFound",
                headers={"X-Repo-Commit": commit.sha},
            )
        names: set[str] = set()
        for p in commit.files:
            if not p.startswith(prefix):
                continue
            parts = p[len(prefix) :].split("/")
            depth = len(parts) if recursive else 1
            for i in range(1, min(depth, len(parts)) + 1):
                names.add(prefix + "/".join(parts[:i]))
        entries = [self._entry(commit, n, expand) for n in sorted(names)]
        entries.sort(key=lambda e: (e["type"] != "directory", e["path"]))
        return [e for e in entries if e is not None]

    def _paths_info(self, repo: _Repo, commit: _Commit) -> list:
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype:
            data = json.loads(self._body or b"{}")
            paths, expand = data.get("paths", []), bool(data.get("expand"))
        else:
            form = parse_qs(self._body.decode(), keep_blank_values=True)
            paths, expand = (
                form.get("paths", []),
                form.get("expand", ["false"])[-1].lower() in ("1", "true"),
            )
        if isinstance(paths, str):
            paths = [paths]
        out = []
        for p in paths:
            e = self._entry(commit, p.strip("/"), expand)
            if e is not None:
                out.append(e)
        return out

    def _refs(self, repo: _Repo) -> dict:
        def ref(kind: str, name: str, sha: str) -> dict:
            return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": sha}

        return {
            "branches": [ref("heads", n, s) for n, s in sorted(repo.branches.items())],
            "converts": [],
            "tags": [ref("tags", n, s) for n, s in sorted(repo.tags.items())],
            "pullRequests": [],
        }


def _parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """(start, end) inclusive; None => serve the whole file (no/ignored Range); 'unsatisfiable' => 416."""
    if not header:
        return None
    m = _RANGE_RE.fullmatch(header)
    if not m:
        return None  # multiple or malformed ranges: ignore the header (RFC 9110 allows it)
    a, b = m.groups()
    if a == "" and b == "":
        return None
    if a == "":
        n = int(b)
        if n == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - n), size - 1
    start = int(a)
    if b and int(b) < start:
        return None  # syntactically invalid: ignore
    if start >= size:
        return "unsatisfiable"
    end = int(b) if b else size - 1
    return start, min(end, size - 1)


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


class HubServer:
    """A Hub-compatible HTTP server on 127.0.0.1 (OS-assigned port), running in a daemon thread.

    Usage::

        with HubServer() as hub:
            sha = hub.add_repo("org/model", {"config.json": b"{}", "model.safetensors": Path(...)})
            ... point huggingface_hub at hub.url (hf_env / patch_hf_hub) ...
            # huggingface_hub 2.4.0 reads a safetensors header with ONE "Range: bytes=0-100000" GET
            assert hub.bytes_by_file[("org/model", "model.safetensors")] <= 100_001

    Attributes:
        url: ``"http://127.0.0.1:PORT"`` (valid after ``start()``).
        tokens: set of accepted bearer tokens for gated/private repos (``hub.tokens = {"hf_good"}``).
        requests: list of :class:`RequestRecord` (method, path, query, range, status, body_bytes, ...).
        bytes_served: total response BODY bytes written (files, JSON and error bodies).
        bytes_by_file: ``{(repo_id, path): body bytes}`` for file content (resolve and CDN routes).
    """

    lfs_suffixes: tuple[str, ...] = LFS_SUFFIXES

    def __init__(self, delay: float = 0.0) -> None:
        #: seconds every request waits before it is answered (the round trip to a distant Hub;
        #: bench/bench_hub.py uses 0.05). Requests wait in their own threads: concurrent ones overlap.
        self.delay: float = delay
        #: fields of every repo-info answer replaced (fault injection: what the Hub never answers,
        #: e.g. ``{"sha": "../../x"}``)
        self.info_overrides: dict[str, Any] = {}
        self.url: str = ""
        self.tokens: set[str] = set()
        self.requests: list[RequestRecord] = []
        self.bytes_served: int = 0
        self.bytes_by_file: dict[tuple[str, str], int] = defaultdict(int)
        self._repos: dict[tuple[str, str], _Repo] = {}
        self._cdn_blobs: dict[str, _Blob] = {}
        self._rules: dict[str, list[_Rule]] = {"fail": [], "reset": [], "stall": []}
        self._redirect_to: HubServer | None = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._conns: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ----
    def start(self) -> "HubServer":
        if self._httpd is not None:
            return self
        self._stop.clear()
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.hub = self
        self._httpd = httpd
        self.url = f"http://127.0.0.1:{httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"HubServer{self.url}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stop.set()  # wake stalled handlers
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:  # drop keep-alive connections held by the client's pool
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- content ----
    def add_repo(
        self,
        repo_id: str,
        files: Mapping[str, bytes | os.PathLike],
        revision: str = "main",
        tags: tuple[str, ...] | list[str] = (),
        gated: bool | str | None = None,
        private: bool | None = None,
        repo_type: str = "model",
    ) -> str:
        """Create a commit holding exactly ``files`` and point branch ``revision`` (and ``tags``) at it.

        ``files`` maps repo paths to bytes or a ``pathlib.Path`` (streamed from disk on each request; it must not
        change afterwards). Returns the 40-hex commit sha (sha1 of repo, parent, branch and file oids: deterministic).
        Calling again for the same repo adds a new commit whose parent is the branch's previous head; ``gated`` /
        ``private`` left to ``None`` keep the repo's current setting (``False`` for a new repo). ``gated=True``
        means ``"auto"``.
        """
        if repo_type not in _URL_PREFIX:
            raise ValueError(f"repo_type must be one of {sorted(_URL_PREFIX)}")
        built = {p.strip("/"): _blob_from(src) for p, src in files.items()}
        with self._lock:
            key = (repo_type, repo_id)
            repo = self._repos.get(key)
            if repo is None:
                repo = _Repo(repo_type=repo_type, repo_id=repo_id, created_at=_now_iso())
                self._repos[key] = repo
            if gated is not None:
                repo.gated = ("auto" if gated is True else gated) if gated else False
            if private is not None:
                repo.private = bool(private)
            parent = repo.branches.get(revision)
            entries = {
                p: _File(path=p, blob=b, lfs=p.endswith(tuple(self.lfs_suffixes)))
                for p, b in built.items()
            }
            h = hashlib.sha1(
                f"{repo_type}/{repo_id}\0{parent}\0{revision}\0{len(repo.commits)}\0".encode()
            )
            for p in sorted(entries):
                h.update(f"{p}\0{entries[p].oid}\0".encode())
            sha = h.hexdigest()
            repo.commits[sha] = _Commit(
                sha=sha,
                files=entries,
                parent=parent,
                title=f"Commit {len(repo.commits) + 1}",
                date=_now_iso(),
            )
            repo.branches[revision] = sha
            for tag in tags:
                repo.tags[tag] = sha
        return sha

    def add_tag(
        self, repo_id: str, tag: str, revision: str = "main", repo_type: str = "model"
    ) -> str:
        """Point ``tag`` at the commit ``revision`` currently resolves to; returns that commit sha."""
        with self._lock:
            repo = self._repos[(repo_type, repo_id)]
            commit = repo.resolve(revision)
            if commit is None:
                raise KeyError(revision)
            repo.tags[tag] = commit.sha
            return commit.sha

    def file_url(
        self, repo_id: str, path: str, revision: str = "main", repo_type: str = "model"
    ) -> str:
        """The /resolve/ URL of a file (what ``huggingface_hub.hf_hub_url`` builds)."""
        return f"{self.url}/{_URL_PREFIX[repo_type]}{repo_id}/resolve/{quote(revision, safe='')}/{quote(path)}"

    # ---- accounting ----
    def reset_counters(self) -> None:
        with self._lock:
            self.requests.clear()
            self.bytes_served = 0
            self.bytes_by_file.clear()

    def requests_for(self, path_substring: str, method: str | None = None) -> list[RequestRecord]:
        with self._lock:
            return [
                r
                for r in self.requests
                if path_substring in unquote(r.path)
                and (method is None or r.method == method.upper())
            ]

    # ---- fault injection ----
    def fail_next(
        self,
        path_substring: str,
        status: int = 500,
        times: int | None = 1,
        method: str | None = None,
    ):
        """The next ``times`` requests whose (decoded) path contains ``path_substring`` get ``status`` (JSON error)."""
        self._add_rule("fail", _Rule(path_substring, times, method, value=status))

    def reset_connection_after(
        self, path_substring: str, nbytes: int, times: int | None = 1, method: str | None = None
    ):
        """Matching responses send their headers and ``nbytes`` body bytes, then the socket is shut down.

        HEAD requests are never matched (no body), so a HEAD does not use up ``times``."""
        self._add_rule("reset", _Rule(path_substring, times, method, value=nbytes, needs_body=True))

    def stall(
        self,
        path_substring: str,
        seconds: float,
        times: int | None = 1,
        method: str | None = None,
        after_bytes: int | None = None,
    ):
        """Matching requests wait ``seconds`` before the response (or, with ``after_bytes=n``, after sending the
        headers and n body bytes; HEAD requests are then not matched). ``stop()`` interrupts a stall."""
        rule = _Rule(path_substring, times, method, value=seconds, extra=after_bytes)
        rule.needs_body = after_bytes is not None
        self._add_rule("stall", rule)

    def redirect_resolves_to(self, other: "HubServer | None") -> None:
        """Answer resolve requests for LFS files with a 302 to ``other``'s ``/__cdn__/`` route (absolute URL on
        another origin, like the Hub's CDN redirect). ``None`` disables it."""
        self._redirect_to = other

    def clear_faults(self) -> None:
        with self._lock:
            for rules in self._rules.values():
                rules.clear()
            self._redirect_to = None

    # ---- internals ----
    def _add_rule(self, kind: str, rule: _Rule) -> None:
        if rule.times is not None and rule.times <= 0:
            return
        with self._lock:
            self._rules[kind].append(rule)

    def _take(self, kind: str, method: str, path: str, body: bool = True) -> _Rule | None:
        with self._lock:
            return _take(self._rules[kind], method, path, body)

    def _register_cdn_blob(self, blob: _Blob, repo_id: str, path: str) -> str:
        with self._lock:
            self._cdn_blobs[blob.sha256] = blob
        return f"{self.url}/__cdn__/{blob.sha256}?" + urlencode({"repo": repo_id, "path": path})

    def _record(self, rec: RequestRecord) -> None:
        with self._lock:
            self.requests.append(rec)

    def _count(self, n: int, key: tuple[str, str] | None) -> None:
        with self._lock:
            self.bytes_served += n
            if key is not None:
                self.bytes_by_file[key] += n

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)


# --------------------------------------------------------------------------------------------------
# Pointing huggingface_hub at a HubServer
# --------------------------------------------------------------------------------------------------


def hf_env(
    server: HubServer | str,
    hf_home: os.PathLike | str,
    base: Mapping[str, str] | None = None,
    **extra,
):
    """Environment for a SUBPROCESS running huggingface_hub against ``server`` (env is read at import).

    Sets HF_ENDPOINT and HF_HOME (cache = HF_HOME/hub, token file = HF_HOME/token), removes inherited token /
    cache / offline / endpoint variables, silences progress bars and telemetry. ``extra`` adds/overrides
    variables (e.g. ``HF_HUB_OFFLINE="1"``, ``HF_HUB_DOWNLOAD_TIMEOUT="1"`` -- integers only: 2.4.0 does
    ``int(value)`` at import, so "0.5" crashes the import)."""
    env = dict(os.environ if base is None else base)
    for var in list(env):
        if var.startswith(("HF_", "HUGGINGFACE_")) or var in (
            "TRANSFORMERS_OFFLINE",
            "DO_NOT_TRACK",
        ):
            del env[var]
    env.update(
        HF_ENDPOINT=server.url if isinstance(server, HubServer) else str(server),
        HF_HOME=str(hf_home),
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_UPDATE_CHECK="1",
        HF_HUB_DISABLE_IMPLICIT_TOKEN="1",
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def patch_hf_hub(monkeypatch, endpoint: str, hf_home: os.PathLike | str) -> None:
    """Point an ALREADY IMPORTED huggingface_hub (2.4.0) at ``endpoint`` and a private HF_HOME, in-process.

    Needed because constants are frozen at import: patches ``constants.ENDPOINT``,
    ``constants.HUGGINGFACE_CO_URL_TEMPLATE`` (used by ``hf_hub_url`` when no ``endpoint=`` is given), the
    endpoint of the module-level ``HfApi`` behind ``huggingface_hub.model_info`` & co, and the cache / token paths.
    Also sets the env vars (for code that reads them, and for subprocesses). Not covered in-process: the
    timeout constants used as DEFAULT ARGUMENTS (``get_hf_file_metadata(timeout=)``,
    ``get_safetensors_metadata(timeout=)`` are bound at import) -- pass ``timeout=`` or use a subprocess.
    ``constants.HF_HUB_OFFLINE``, ``HF_HUB_ETAG_TIMEOUT`` (in hf_hub_download) and ``HF_HUB_DOWNLOAD_TIMEOUT``
    (in the GET of hf_hub_download) ARE read at call time and can be monkeypatched directly.
    """
    from huggingface_hub import constants, hf_api

    endpoint = endpoint.rstrip("/")
    hf_home = str(hf_home)
    cache = os.path.join(hf_home, "hub")
    for var in (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HOME", hf_home)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(
        constants,
        "HUGGINGFACE_CO_URL_TEMPLATE",
        endpoint + "/{repo_id}/resolve/{revision}/{filename}",
    )
    monkeypatch.setattr(hf_api.api, "endpoint", endpoint)
    monkeypatch.setattr(constants, "HF_HOME", hf_home)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", cache)
    monkeypatch.setattr(constants, "HUGGINGFACE_HUB_CACHE", cache, raising=False)
    monkeypatch.setattr(constants, "HF_ASSETS_CACHE", os.path.join(hf_home, "assets"))
    monkeypatch.setattr(constants, "HF_XET_CACHE", os.path.join(hf_home, "xet"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", os.path.join(hf_home, "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", os.path.join(hf_home, "stored_tokens"))
    # huggingface_hub >= 2.x fetches an "agent harnesses" registry once a day (to label its user
    # agent) into a file under HF_HOME computed at import: point it into this HF_HOME, already
    # filled with an empty registry, so no test counts that request and none writes the real home
    harnesses = os.path.join(hf_home, ".agent_harnesses.json")
    os.makedirs(hf_home, exist_ok=True)
    with open(harnesses, "w") as f:
        json.dump({"standardEnvVars": [], "harnesses": {}}, f)
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", harnesses, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", constants.DEFAULT_ETAG_TIMEOUT)
    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", constants.DEFAULT_DOWNLOAD_TIMEOUT)
