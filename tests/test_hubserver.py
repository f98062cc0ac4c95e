"""Proves tests/hubserver.py speaks the Hub protocol well enough for the REAL huggingface_hub client.

How the client is pointed at the server (huggingface_hub 2.4.0 freezes its config at import):
* in-process: ``patch_hf_hub(monkeypatch, hub.url, hf_home)`` (fixture ``hf`` below) -- patches
  ``constants.ENDPOINT``/``HUGGINGFACE_CO_URL_TEMPLATE``/cache+token paths and the module-level ``HfApi``;
* subprocess: ``env=hf_env(hub, hf_home, ...)`` -- plain HF_ENDPOINT / HF_HOME env vars (test_subprocess_*).
Nothing inside huggingface_hub is mocked: every call goes over HTTP to 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import huggingface_hub
import numpy as np
import pytest
from huggingface_hub import HfApi, constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from safetensors.numpy import save, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hubserver import HubServer, hf_env, patch_hf_hub  # noqa: E402

REPO = "acme/tiny"
CONFIG_V1 = b'{"model_type": "tiny", "version": 1}'
CONFIG_V2 = b'{"model_type": "tiny", "version": 2}'


# ----------------------------------------------------------------------------------------------- fixtures


@pytest.fixture
def hub():
    with HubServer() as server:
        yield server


@pytest.fixture
def hf(hub, tmp_path, monkeypatch):
    """huggingface_hub (already imported) pointed at `hub`, with a private HF_HOME. Returns HF_HOME."""
    hf_home = tmp_path / "hf_home"
    patch_hf_hub(monkeypatch, hub.url, hf_home)
    return hf_home


def _weights(rows: int = 768) -> dict[str, np.ndarray]:
    # rows=768 -> 3 MiB of float32 for "big"
    return {
        "big": np.arange(rows * 1024, dtype=np.float32).reshape(rows, 1024),
        "bias": np.ones((7,), dtype=np.float16),
        "ids": np.zeros((2, 3, 4), dtype=np.int64),
    }


@pytest.fixture
def st_file(tmp_path) -> Path:
    """A ~3 MiB safetensors file on disk (served from disk as a Path)."""
    p = tmp_path / "src" / "model.safetensors"
    p.parent.mkdir(parents=True, exist_ok=True)
    save_file(_weights(), str(p))
    return p


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------------------------- model_info


def test_model_info_files_metadata(hub, hf, st_file):
    sha = hub.add_repo(REPO, {"config.json": CONFIG_V1, "model.safetensors": st_file})

    info = huggingface_hub.model_info(
        REPO, files_metadata=True
    )  # module-level HfApi: proves the patch works

    assert info.id == REPO and info.sha == sha
    assert info.private is False and info.gated is False
    sib = {s.rfilename: s for s in info.siblings}
    assert set(sib) == {"config.json", "model.safetensors"}
    weights = st_file.read_bytes()
    assert sib["model.safetensors"].lfs.sha256 == _sha256(weights)
    assert sib["model.safetensors"].lfs.size == sib["model.safetensors"].size == len(weights)
    assert sib["model.safetensors"].lfs.pointer_size > 100
    assert sib["config.json"].lfs is None and sib["config.json"].size == len(CONFIG_V1)
    # blob id of a regular file is its git blob sha1
    assert (
        sib["config.json"].blob_id
        == hashlib.sha1(b"blob %d\0" % len(CONFIG_V1) + CONFIG_V1).hexdigest()
    )
    assert info.safetensors.total == 768 * 1024 + 7 + 24
    assert info.safetensors.parameters == {"F32": 768 * 1024, "F16": 7, "I64": 24}
    assert [r.query for r in hub.requests_for("/api/models/")] == ["blobs=true"]

    # without files_metadata: names only; revision endpoint with explicit endpoint= works too
    info2 = HfApi(endpoint=hub.url).model_info(REPO, revision=sha)
    assert info2.sha == sha and all(s.size is None for s in info2.siblings)
    assert hub.requests[-1].path == f"/api/models/{REPO}/revision/{sha}"


def test_tree_paths_info_refs(hub, hf):
    sha = hub.add_repo(
        REPO, {"a.txt": b"a", "sub/b.bin": b"bb", "sub/deep/c.json": b"{}"}, tags=["v1"]
    )
    api = HfApi()
    assert sorted(api.list_repo_files(REPO)) == ["a.txt", "sub/b.bin", "sub/deep/c.json"]
    top = {e.path: type(e).__name__ for e in api.list_repo_tree(REPO)}
    assert top == {"a.txt": "RepoFile", "sub": "RepoFolder"}
    infos = api.get_paths_info(REPO, ["sub/b.bin", "sub", "missing"], revision="v1")
    by_path = {e.path: e for e in infos}
    assert set(by_path) == {"sub/b.bin", "sub"}
    assert by_path["sub/b.bin"].lfs.sha256 == _sha256(b"bb") and by_path["sub/b.bin"].size == 2
    refs = api.list_repo_refs(REPO)
    assert [(b.name, b.target_commit) for b in refs.branches] == [("main", sha)]
    assert [(t.name, t.target_commit) for t in refs.tags] == [("v1", sha)]
    assert api.file_exists(REPO, "sub/deep/c.json") and not api.file_exists(REPO, "nope.json")
    assert api.repo_exists(REPO) and not api.repo_exists("acme/other")
    assert api.revision_exists(REPO, "v1") and not api.revision_exists(REPO, "v2")


# ----------------------------------------------------------------------------------------------- downloads


def test_hf_hub_download_branch_tag_and_commit(hub, hf):
    sha1 = hub.add_repo(REPO, {"config.json": CONFIG_V1}, tags=["v1"])
    sha2 = hub.add_repo(REPO, {"config.json": CONFIG_V2})
    assert len({sha1, sha2}) == 2 and all(len(s) == 40 and int(s, 16) >= 0 for s in (sha1, sha2))
    storage = hf / "hub" / "models--acme--tiny"

    p_main = Path(hf_hub_download(REPO, "config.json"))
    assert p_main.read_bytes() == CONFIG_V2
    assert p_main == storage / "snapshots" / sha2 / "config.json"
    assert (storage / "refs" / "main").read_text() == sha2
    blob_name = hashlib.sha1(
        b"blob %d\0" % len(CONFIG_V2) + CONFIG_V2
    ).hexdigest()  # ETag of a regular file
    assert p_main.resolve() == (storage / "blobs" / blob_name).resolve()

    p_tag = Path(hf_hub_download(REPO, "config.json", revision="v1"))
    assert p_tag.read_bytes() == CONFIG_V1 and p_tag == storage / "snapshots" / sha1 / "config.json"
    assert (storage / "refs" / "v1").read_text() == sha1

    hub.reset_counters()
    p_sha = Path(hf_hub_download(REPO, "config.json", revision=sha1))
    assert p_sha == p_tag
    assert hub.requests == []  # commit already in cache: no network at all

    p_sha2 = Path(hf_hub_download(REPO, "config.json", revision=sha2, cache_dir=hf / "other_cache"))
    assert p_sha2.read_bytes() == CONFIG_V2 and sha2 in p_sha2.parts
    assert [(r.method, r.status) for r in hub.requests] == [("HEAD", 200), ("GET", 200)]
    assert all(hf in p.parents for p in (p_main, p_tag, p_sha2))  # nothing outside our HF_HOME

    sha3 = hub.add_repo(
        REPO, {"config.json": b"{}", "extra.txt": b"x"}, revision="dev"
    )  # new branch
    p_dev = Path(hf_hub_download(REPO, "extra.txt", revision="dev"))
    assert p_dev == storage / "snapshots" / sha3 / "extra.txt" and p_dev.read_bytes() == b"x"
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(REPO, "extra.txt")  # main is untouched


def test_lfs_download_streams_from_path_and_headers(hub, hf, st_file):
    sha = hub.add_repo(REPO, {"model.safetensors": st_file})
    data = st_file.read_bytes()
    url = hf_hub_url(REPO, "model.safetensors")
    meta = get_hf_file_metadata(url)
    assert (meta.commit_hash, meta.etag, meta.size) == (sha, _sha256(data), len(data))

    head = httpx2.head(url)
    assert head.headers["X-Linked-Etag"] == head.headers["ETag"] == f'"{_sha256(data)}"'
    assert head.headers["X-Linked-Size"] == head.headers["Content-Length"] == str(len(data))
    assert head.headers["Accept-Ranges"] == "bytes" and head.headers["X-Repo-Commit"] == sha

    hub.reset_counters()
    path = Path(hf_hub_download(REPO, "model.safetensors"))
    assert path.read_bytes() == data
    assert path.resolve().name == _sha256(data)  # LFS blobs are cached under their sha256
    assert hub.bytes_by_file[(REPO, "model.safetensors")] == len(data) == hub.bytes_served


def test_range_requests(hub, st_file):
    hub.add_repo(REPO, {"model.safetensors": st_file, "small.txt": b"0123456789"})
    data = st_file.read_bytes()
    url = hub.file_url(REPO, "model.safetensors")
    cases = {
        "bytes=10-19": (10, 19),
        "bytes=100-": (100, len(data) - 1),
        "bytes=-16": (len(data) - 16, len(data) - 1),
    }
    with httpx2.Client() as client:
        for header, (a, b) in cases.items():
            r = client.get(url, headers={"Range": header})
            assert r.status_code == 206, header
            assert r.content == data[a : b + 1]
            assert r.headers["Content-Range"] == f"bytes {a}-{b}/{len(data)}"
            assert r.headers["Content-Length"] == str(b - a + 1)
        r = client.get(hub.file_url(REPO, "small.txt"), headers={"Range": "bytes=5-1000"})
        assert (r.status_code, r.content, r.headers["Content-Range"]) == (
            206,
            b"56789",
            "bytes 5-9/10",
        )
        r = client.get(hub.file_url(REPO, "small.txt"), headers={"Range": "bytes=50-"})
        assert r.status_code == 416 and r.headers["Content-Range"] == "bytes */10"
        r = client.get(hub.file_url(REPO, "small.txt"))
        assert (r.status_code, r.content) == (200, b"0123456789")
    assert [r.range for r in hub.requests[:3]] == list(cases)
    assert [r.status for r in hub.requests] == [206, 206, 206, 206, 416, 200]
    assert [r.body_bytes for r in hub.requests][:3] == [10, len(data) - 100, 16]


def test_server_streams_path_files_without_loading_them(hub, tmp_path):
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:  # 48 MiB sparse file
        f.truncate(48 * 1024 * 1024)
    hub.add_repo(REPO, {"big.bin": big})
    tracemalloc.start()
    try:
        total = 0
        with httpx2.stream("GET", hub.file_url(REPO, "big.bin")) as r:
            for chunk in r.iter_raw(64 * 1024):
                total += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == 48 * 1024 * 1024 == hub.bytes_by_file[(REPO, "big.bin")]
    assert peak < 8 * 1024 * 1024  # far below the file size: streamed in chunks


def test_dataset_repo_type(hub, hf):
    sha = hub.add_repo("acme/data", {"data/train.csv": b"a,b\n1,2\n"}, repo_type="dataset")
    p = Path(hf_hub_download("acme/data", "data/train.csv", repo_type="dataset"))
    assert p.read_bytes() == b"a,b\n1,2\n" and sha in p.parts and "datasets--acme--data" in p.parts
    assert HfApi().dataset_info("acme/data").sha == sha
    with pytest.raises(RepositoryNotFoundError):  # same id is not a model repo
        hf_hub_download("acme/data", "data/train.csv")


# ----------------------------------------------------------------------------------------------- safetensors


def test_get_safetensors_metadata_single_file_reads_only_header(hub, hf, st_file):
    hub.add_repo(REPO, {"config.json": CONFIG_V1, "model.safetensors": st_file})
    # the client's once-per-process requests (huggingface_hub 2.x asks /api/agent-harnesses the
    # first time it talks to an endpoint) happen before the count starts, whichever test ran first
    huggingface_hub.get_safetensors_metadata(REPO)
    hub.reset_counters()

    meta = huggingface_hub.get_safetensors_metadata(REPO)

    assert meta.sharded is False
    tensors = meta.files_metadata["model.safetensors"].tensors
    assert {n: (t.dtype, t.shape) for n, t in tensors.items()} == {
        "big": ("F32", [768, 1024]),
        "bias": ("F16", [7]),
        "ids": ("I64", [2, 3, 4]),
    }
    assert meta.weight_map == {n: "model.safetensors" for n in ("big", "bias", "ids")}
    size = st_file.stat().st_size
    # 2.4.0 always asks for "bytes=0-100000" (100_001 bytes) to get the header in one round trip
    assert hub.bytes_by_file[(REPO, "model.safetensors")] == 100_001
    assert hub.bytes_served == 100_001 < size / 30
    assert [(r.method, r.range, r.status) for r in hub.requests] == [
        ("HEAD", None, 200),  # file_exists(model.safetensors)
        ("GET", "bytes=0-100000", 206),
    ]


def test_get_safetensors_metadata_large_header_second_range(hub, hf):
    tensors = {f"layer.{i}.weight": np.zeros((2, 2), dtype=np.float32) for i in range(2500)}
    blob = save(tensors)
    header_len = int.from_bytes(blob[:8], "little")
    assert header_len > 100_000  # forces the client's second Range request
    hub.add_repo(REPO, {"model.safetensors": blob})
    meta = HfApi().get_safetensors_metadata(REPO)
    assert len(meta.files_metadata["model.safetensors"].tensors) == 2500
    assert [r.range for r in hub.requests_for("model.safetensors", "GET")] == [
        "bytes=0-100000",
        f"bytes=8-{header_len + 7}",
    ]


def _sharded_repo(hub, tmp_path, repo=REPO) -> tuple[dict, int]:
    shard_dir = tmp_path / "shards"
    shard_dir.mkdir(exist_ok=True)
    s1 = {"embed.weight": np.zeros((512, 1024), dtype=np.float32)}
    s2 = {
        "head.weight": np.ones((512, 1024), dtype=np.float16),
        "head.bias": np.ones((512,), dtype=np.float16),
    }
    files: dict = {}
    weight_map = {}
    for name, tensors in (
        ("model-00001-of-00002.safetensors", s1),
        ("model-00002-of-00002.safetensors", s2),
    ):
        save_file(tensors, str(shard_dir / name))
        files[name] = shard_dir / name
        weight_map.update({t: name for t in tensors})
    index = {"metadata": {"total_size": 123}, "weight_map": weight_map}
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    files["config.json"] = CONFIG_V1
    hub.add_repo(repo, files)
    return weight_map, sum(p.stat().st_size for p in shard_dir.iterdir())


def test_get_safetensors_metadata_sharded(hub, hf, tmp_path):
    weight_map, weights_size = _sharded_repo(hub, tmp_path)
    hub.reset_counters()

    meta = huggingface_hub.get_safetensors_metadata(REPO)

    assert meta.sharded is True and meta.metadata == {"total_size": 123}
    assert meta.weight_map == weight_map
    shard2 = meta.files_metadata["model-00002-of-00002.safetensors"].tensors
    assert (shard2["head.weight"].dtype, shard2["head.weight"].shape) == ("F16", [512, 1024])
    assert meta.files_metadata["model-00001-of-00002.safetensors"].tensors[
        "embed.weight"
    ].shape == [512, 1024]
    for shard in set(weight_map.values()):
        assert hub.bytes_by_file[(REPO, shard)] == 100_001
    assert hub.bytes_served < 250_000 < weights_size / 10
    # the index was downloaded into OUR cache (get_safetensors_metadata gives no cache_dir option)
    assert list(
        (hf / "hub" / "models--acme--tiny" / "snapshots").glob("*/model.safetensors.index.json")
    )


# ----------------------------------------------------------------------------------------------- errors & auth


def test_not_found_errors(hub, hf):
    hub.add_repo(REPO, {"config.json": CONFIG_V1})
    api = HfApi()
    with pytest.raises(RepositoryNotFoundError) as e:
        hf_hub_download("acme/missing", "config.json")
    assert not isinstance(e.value, GatedRepoError) and e.value.response.status_code == 404
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("acme/missing")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, "config.json", revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        api.model_info(REPO, revision="f" * 40)
    with pytest.raises(RemoteEntryNotFoundError) as e:
        hf_hub_download(REPO, "missing.json")
    assert isinstance(e.value, EntryNotFoundError)
    # the client caches the non-existence under the commit sent in X-Repo-Commit
    assert list((hf / "hub" / "models--acme--tiny" / ".no_exist").glob("*/missing.json"))
    with pytest.raises(huggingface_hub.errors.NotASafetensorsRepoError):
        api.get_safetensors_metadata(REPO)


def test_gated_repo(hub, hf, st_file):
    hub.add_repo(REPO, {"config.json": CONFIG_V1, "model.safetensors": st_file}, gated=True)
    hub.tokens = {"hf_good"}

    with pytest.raises(GatedRepoError) as e:
        hf_hub_download(REPO, "config.json")
    assert e.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as e:
        hf_hub_download(REPO, "config.json", token="hf_bad")
    assert e.value.response.status_code == 403
    with pytest.raises(GatedRepoError):
        huggingface_hub.get_safetensors_metadata(REPO)
    assert HfApi().model_info(REPO).gated == "auto"  # repo metadata stays public, like on the Hub

    assert Path(hf_hub_download(REPO, "config.json", token="hf_good")).read_bytes() == CONFIG_V1
    meta = HfApi(token="hf_good").get_safetensors_metadata(REPO)
    assert set(meta.weight_map) == {"big", "bias", "ids"}
    assert hub.requests[-1].authorization == "Bearer hf_good"


def test_private_repo(hub, hf):
    hub.add_repo(REPO, {"config.json": CONFIG_V1}, private=True)
    hub.tokens = {"hf_good"}
    with pytest.raises(RepositoryNotFoundError):
        HfApi().model_info(REPO)
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download(REPO, "config.json", token="hf_bad")
    assert HfApi(token="hf_good").model_info(REPO).private is True
    assert Path(hf_hub_download(REPO, "config.json", token="hf_good")).read_bytes() == CONFIG_V1


# ----------------------------------------------------------------------------------------------- offline


def test_offline_mode_serves_from_cache(hub, hf, monkeypatch):
    sha = hub.add_repo(REPO, {"config.json": CONFIG_V1, "other.json": b"{}"})
    online = hf_hub_download(REPO, "config.json")
    hub.reset_counters()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets at import

    assert hf_hub_download(REPO, "config.json") == online
    assert hf_hub_download(REPO, "config.json", revision=sha) == online
    with pytest.raises(LocalEntryNotFoundError):
        hf_hub_download(REPO, "other.json")  # never downloaded
    with pytest.raises(huggingface_hub.errors.OfflineModeIsEnabled):
        HfApi().model_info(REPO)
    assert hub.requests == []


# ----------------------------------------------------------------------------------------------- subprocess


_CHILD = textwrap.dedent(
    """
    import json, sys
    import huggingface_hub as hh
    from huggingface_hub import constants
    out = {"endpoint": constants.ENDPOINT, "cache": constants.HF_HUB_CACHE}
    step = sys.argv[1]
    if step == "online":
        out["config"] = open(hh.hf_hub_download("acme/tiny", "config.json")).read()
        out["tensors"] = sorted(hh.get_safetensors_metadata("acme/tiny").weight_map)
        out["sha"] = hh.model_info("acme/tiny").sha
    else:
        out["config"] = open(hh.hf_hub_download("acme/tiny", "config.json")).read()
    print(json.dumps(out))
    """
)


def _child(step: str, env: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, step], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_subprocess_env_vars(hub, tmp_path, st_file):
    """The CLI way: configure huggingface_hub purely with env vars in a fresh interpreter."""
    sha = hub.add_repo(REPO, {"config.json": CONFIG_V1, "model.safetensors": st_file})
    hf_home = tmp_path / "child_home"
    out = _child("online", hf_env(hub, hf_home))
    assert out["endpoint"] == hub.url and out["cache"] == str(hf_home / "hub")
    assert out["config"] == CONFIG_V1.decode() and out["sha"] == sha
    assert out["tensors"] == ["bias", "big", "ids"]
    assert (hf_home / "hub" / "models--acme--tiny" / "snapshots" / sha / "config.json").exists()
    assert len(hub.requests) == 5  # HEAD+GET config, HEAD+ranged GET safetensors, model_info

    hub.reset_counters()
    out = _child("offline", hf_env(hub, hf_home, HF_HUB_OFFLINE="1"))
    assert out["config"] == CONFIG_V1.decode()
    assert hub.requests == []


def test_subprocess_etag_timeout_env(hub, tmp_path):
    hub.add_repo(REPO, {"config.json": CONFIG_V1, "model.safetensors": save(_weights(4))})
    hub.stall("resolve/main/config.json", 5, times=None, method="HEAD")
    code = textwrap.dedent(
        """
        import time, huggingface_hub as hh
        t = time.monotonic()
        try:
            hh.get_hf_file_metadata(hh.hf_hub_url("acme/tiny", "config.json"))
        except Exception as e:
            print(type(e).__name__, round(time.monotonic() - t, 1))
        """
    )
    env = hf_env(hub, tmp_path / "h", HF_HUB_ETAG_TIMEOUT="1")
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    name, seconds = proc.stdout.split()
    assert name == "ReadTimeout" and 0.9 <= float(seconds) < 3, proc.stdout + proc.stderr


# ----------------------------------------------------------------------------------------------- faults


def test_fail_next_head_500_is_retried_by_hf_hub_download(hub, hf):
    hub.add_repo(REPO, {"config.json": CONFIG_V1})
    hub.fail_next("config.json", status=500, times=1)
    assert Path(hf_hub_download(REPO, "config.json")).read_bytes() == CONFIG_V1
    assert [(r.method, r.status) for r in hub.requests] == [
        ("HEAD", 500),
        ("HEAD", 200),
        ("GET", 200),
    ]


def test_fail_next_get_500_is_not_retried(hub, hf):
    hub.add_repo(REPO, {"config.json": CONFIG_V1})
    hub.fail_next("config.json", status=500, method="GET")
    with pytest.raises(HfHubHTTPError) as e:
        hf_hub_download(REPO, "config.json")
    assert e.value.response.status_code == 500
    assert Path(hf_hub_download(REPO, "config.json")).read_bytes() == CONFIG_V1  # fault consumed
    hub.fail_next(f"/api/models/{REPO}", status=503)
    with pytest.raises(HfHubHTTPError) as e:
        HfApi().model_info(REPO)  # plain get_session().get(): no retry on 5xx
    assert e.value.response.status_code == 503
    hub.fail_next("/tree/", status=503)
    assert HfApi().list_repo_files(REPO) == ["config.json"]  # http_backoff: retried after 1 s
    assert [r.status for r in hub.requests_for("/tree/")] == [503, 200]


MiB = 1024 * 1024


@pytest.fixture
def big_bin(tmp_path) -> Path:
    """12 MiB of random bytes, served as an LFS file (pytorch_model.bin). http_get writes in 10 MiB chunks
    (constants.DOWNLOAD_CHUNK_SIZE), so only a failure after the first 10 MiB can be resumed with a Range."""
    p = tmp_path / "src" / "pytorch_model.bin"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(os.urandom(12 * MiB))
    return p


def test_reset_mid_body_resumes_with_range(hub, hf, big_bin):
    hub.add_repo(REPO, {"pytorch_model.bin": big_bin})
    hub.reset_connection_after("pytorch_model.bin", 11 * MiB)
    path = Path(hf_hub_download(REPO, "pytorch_model.bin"))
    assert _sha256(path.read_bytes()) == _sha256(big_bin.read_bytes())
    gets = hub.requests_for("pytorch_model.bin", "GET")
    assert [(r.range, r.status, r.body_bytes) for r in gets] == [
        (None, 200, 11 * MiB),
        (f"bytes={10 * MiB}-", 206, 2 * MiB),
    ]
    assert hub.bytes_by_file[(REPO, "pytorch_model.bin")] == 13 * MiB


def test_reset_mid_body_raises_clean_error(hub, hf, st_file):
    hub.add_repo(REPO, {"model.safetensors": st_file})
    hub.reset_connection_after("model.safetensors", 4, method="GET")
    with pytest.raises(httpx2.RemoteProtocolError):
        huggingface_hub.get_safetensors_metadata(REPO)  # the header GET is not retried
    assert hub.requests[-1].body_bytes == 4
    assert set(huggingface_hub.get_safetensors_metadata(REPO).weight_map) == {"big", "bias", "ids"}


def test_stall_times_out(hub, hf):
    hub.add_repo(REPO, {"config.json": CONFIG_V1})
    hub.stall("config.json", 3)
    t = time.monotonic()
    with pytest.raises(httpx2.TimeoutException):
        get_hf_file_metadata(hf_hub_url(REPO, "config.json"), timeout=0.3)
    assert time.monotonic() - t < 2


def test_stall_head_falls_back_to_retry_with_long_timeout(hub, hf, monkeypatch):
    hub.add_repo(REPO, {"config.json": CONFIG_V1})
    monkeypatch.setattr(
        constants, "HF_HUB_ETAG_TIMEOUT", 1
    )  # == HF_HUB_ETAG_TIMEOUT=1 at import time
    hub.stall("config.json", 3, method="HEAD")
    t = time.monotonic()
    assert Path(hf_hub_download(REPO, "config.json")).read_bytes() == CONFIG_V1
    assert 0.9 < time.monotonic() - t < 2.5
    # first HEAD still stalled (status 0: no response yet) -> client retried the HEAD with a 60 s timeout
    assert [(r.method, r.status) for r in hub.requests] == [
        ("HEAD", 0),
        ("HEAD", 200),
        ("GET", 200),
    ]


def test_stall_mid_body_download_timeout_then_resume(hub, hf, monkeypatch, big_bin):
    hub.add_repo(REPO, {"pytorch_model.bin": big_bin})
    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 1)  # read at call time by http_get
    hub.stall("pytorch_model.bin", 3, after_bytes=11 * MiB)
    path = Path(hf_hub_download(REPO, "pytorch_model.bin"))
    assert path.read_bytes() == big_bin.read_bytes()
    gets = hub.requests_for("pytorch_model.bin", "GET")
    assert [(r.range, r.status) for r in gets] == [(None, 200), (f"bytes={10 * MiB}-", 206)]
    assert gets[0].body_bytes == 11 * MiB  # stalled there until the client's 1 s read timeout


def test_redirect_to_cdn(hub, hf, tmp_path):
    weight_map, _ = _sharded_repo(hub, tmp_path)
    hub.add_repo(
        "acme/gated", {"model.safetensors": save(_weights(8)), "config.json": CONFIG_V1}, gated=True
    )
    hub.tokens = {"hf_good"}
    with HubServer() as cdn:
        hub.redirect_resolves_to(cdn)
        hub.reset_counters()

        meta = huggingface_hub.get_safetensors_metadata(REPO)
        assert meta.weight_map == weight_map
        shard = "model-00001-of-00002.safetensors"
        assert hub.bytes_by_file.get((REPO, shard), 0) == 0  # hub only answered 302s
        assert cdn.bytes_by_file[(REPO, shard)] == 100_001
        # file_exists("model.safetensors") probe -> 404; then one ranged GET per shard -> 302 to the CDN
        assert sorted(
            (r.method, r.status) for r in hub.requests if r.path.endswith(".safetensors")
        ) == [
            ("GET", 302),
            ("GET", 302),
            ("HEAD", 404),
        ]
        assert {r.range for r in cdn.requests} == {"bytes=0-100000"}

        path = Path(hf_hub_download("acme/gated", "model.safetensors", token="hf_good"))
        assert path.read_bytes() == save(_weights(8))
        assert path.resolve().name == _sha256(
            path.read_bytes()
        )  # etag came from the 302's X-Linked-Etag
        cdn_get = cdn.requests[-1]
        assert cdn_get.method == "GET" and cdn_get.status == 200
        assert cdn_get.authorization is None  # token not forwarded off the Hub
        # non-LFS files are still served by the hub itself
        assert (
            Path(hf_hub_download("acme/gated", "config.json", token="hf_good")).read_bytes()
            == CONFIG_V1
        )
        assert hub.requests[-1].status == 200
        hub.redirect_resolves_to(None)


def test_concurrent_clients(hub, hf, st_file):
    hub.add_repo(REPO, {"model.safetensors": st_file, "config.json": CONFIG_V1})
    data = st_file.read_bytes()
    url = hub.file_url(REPO, "model.safetensors")

    def job(i: int) -> bool:
        if i % 4 == 0:
            return set(HfApi().get_safetensors_metadata(REPO).weight_map) == {"big", "bias", "ids"}
        a = (i * 9973) % (len(data) - 5000)
        r = httpx2.get(url, headers={"Range": f"bytes={a}-{a + 4999}"})
        return r.status_code == 206 and r.content == data[a : a + 5000]

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(job, range(48)))
    assert all(results)
    assert len(hub.requests) == 36 + 12 * 2
    assert threading.active_count() < 200


def test_counters_and_log(hub):
    hub.add_repo(REPO, {"a.txt": b"hello"})
    r = httpx2.get(hub.file_url(REPO, "a.txt"), headers={"Range": "bytes=1-2"})
    assert r.content == b"el"
    rec = hub.requests[-1]
    assert (rec.method, rec.path, rec.range, rec.status, rec.body_bytes) == (
        "GET",
        f"/{REPO}/resolve/main/a.txt",
        "bytes=1-2",
        206,
        2,
    )
    assert hub.bytes_served == 2 and hub.bytes_by_file == {(REPO, "a.txt"): 2}
    hub.reset_counters()
    assert hub.requests == [] and hub.bytes_served == 0 and not hub.bytes_by_file
    hub.stop()
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(hub.file_url(REPO, "a.txt"))
