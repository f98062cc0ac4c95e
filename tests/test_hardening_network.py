"""Hardening, part 2: network faults between ``weightcheck`` and a Hub (tests/hubserver.py).

The real huggingface_hub client talks to a Hub-compatible server on 127.0.0.1 that injects the
faults: HTTP 500s, connections reset in the middle of a body, stalls, and LFS downloads
redirected to another host. Fault tests run the CLI in a fresh interpreter (``hf_env``), as a
user does, because huggingface_hub logs its retries on the process's real stderr: what the user
sees is exactly one line, or nothing.

Decisions (docs/reliability.md):
* header Range reads: huggingface_hub's backoff (3 retries, 0.5-4 s) for 5xx, timeouts and refused
  connections; a connection dropped mid-body is retried by weightcheck (4 attempts);
* ``model_info`` and the config.json download are not retried on HTTP 500 by huggingface_hub 2.4
  (and weightcheck adds no retry of its own): one line naming the repo (or file) and the status,
  exit 2; running the command again is the retry;
* a stalled server: HF_HUB_DOWNLOAD_TIMEOUT (whole seconds) bounds each request.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import synth
from conftest import K2, load_config, run_cli, run_subprocess
from helpers.bad_input import one_error_line
from helpers.hardening import OpenAudit
from hubserver import HubServer, hf_env, patch_hf_hub

REPO = "org/d"
ST = "model.safetensors"


def repo_files(folder):
    return {p.name: p for p in folder.iterdir() if p.is_file()}


@pytest.fixture
def drafter(make_drafter):
    """A drafter of ~8 MB (so 'header only' is visible in the byte counts)."""
    cfg = synth.scaled_config(
        load_config(K2),
        hidden=256,
        intermediate=1024,
        heads=8,
        head_dim=32,
        vocab=8192,
        draft_vocab=2000,
    )
    d = make_drafter("big", cfg, include_embed=True)
    assert os.path.getsize(d / ST) > 5_000_000
    return d


@pytest.fixture
def server(drafter):
    with HubServer() as hub:
        hub.add_repo(REPO, repo_files(drafter))
        yield hub


def inspect_sub(server, tmp_path, *extra_args, **env):
    """``weightcheck inspect org/d --json`` in a fresh interpreter; (result, seconds)."""
    t0 = time.monotonic()
    r = run_subprocess(
        "inspect",
        REPO,
        "--json",
        *extra_args,
        env=hf_env(server, tmp_path / "home", **env),
        timeout=120,
    )
    return r, time.monotonic() - t0


def ranges(server, path=ST):
    return [(q.status, q.range, q.body_bytes) for q in server.requests_for(path, "GET")]


def assert_inspected(r, drafter_dir):
    assert r.exit_code == 0, r
    assert r.stderr == "", f"a successful run prints nothing on stderr: {r.stderr!r}"
    names = {t["name"] for t in json.loads(r.stdout)["tensors"]}
    assert {"fc.weight", "lm_head.weight", "d2t"} <= names


# --- HTTP 500 ---------------------------------------------------------------------------------
def test_header_read_500_then_success_is_retried(server, drafter, tmp_path):
    server.fail_next(ST, 500, method="GET")
    r, _ = inspect_sub(server, tmp_path)
    assert_inspected(r, drafter)
    got = ranges(server)
    assert [g[0] for g in got] == [500, 206], got  # the same Range, asked again
    assert got[0][1] == got[1][1] == "bytes=0-4095"


@pytest.mark.slow  # the client's whole backoff, waited out: 4-8 s
def test_header_read_500_every_time_gives_up_with_one_line(server, tmp_path):
    server.fail_next(ST, 500, method="GET", times=None)
    r, seconds = inspect_sub(server, tmp_path)
    one_error_line(r, "HTTP 500", where=f"{REPO}/{ST}")
    assert len(ranges(server)) == 4  # 1 + huggingface_hub's 3 retries
    assert seconds < 20, seconds  # 0.5 + 1 + 2 s of backoff


def test_model_info_500_is_not_retried_one_line(server, drafter, tmp_path):
    """huggingface_hub 2.4 does not retry model_info: the user gets one line, then a rerun works."""
    server.fail_next(f"/api/models/{REPO}", 500)
    r, seconds = inspect_sub(server, tmp_path)
    line = one_error_line(r, "Hub request failed (HTTP 500)", where=REPO)
    assert "Traceback" not in line and seconds < 10
    assert len(server.requests_for(f"/api/models/{REPO}")) == 1
    assert not server.requests_for(ST)  # nothing else was tried
    r, _ = inspect_sub(server, tmp_path)
    assert_inspected(r, drafter)


def test_config_download_500_is_one_line_naming_the_file(server, drafter, tmp_path):
    server.fail_next("config.json", 500, method="GET")
    r, _ = inspect_sub(server, tmp_path)
    one_error_line(r, "HTTP 500", where=f"{REPO}/config.json")
    r, _ = inspect_sub(server, tmp_path)
    assert_inspected(r, drafter)


def test_config_metadata_500_is_retried_by_huggingface_hub(server, drafter, tmp_path):
    server.fail_next("config.json", 500, method="HEAD")
    r, _ = inspect_sub(server, tmp_path)
    assert_inspected(r, drafter)
    assert [q.status for q in server.requests_for("config.json", "HEAD")] == [500, 200]


# --- connection reset -------------------------------------------------------------------------
def test_connection_reset_in_the_middle_of_a_header_read_is_retried(server, drafter, tmp_path):
    """Was: 'cannot reach ...: RuntimeError: generator didn't stop after throw()' plus
    huggingface_hub's retry warnings on stderr (fixed in hub.HubRepo.read_range)."""
    server.reset_connection_after(ST, 100, method="GET")
    r, _ = inspect_sub(server, tmp_path)
    assert_inspected(r, drafter)
    got = ranges(server)
    assert got[0] == (206, "bytes=0-4095", 100), got  # cut after 100 of 4096 bytes
    assert got[1] == (206, "bytes=0-4095", 4096), got


@pytest.mark.slow  # the client's whole backoff, waited out: 4-8 s
def test_connection_reset_every_time_gives_up_with_one_line(server, tmp_path):
    server.reset_connection_after(ST, 100, method="GET", times=None)
    r, seconds = inspect_sub(server, tmp_path)
    one_error_line(r, "dropped while reading", "4 times", where=f"{REPO}/{ST}")
    assert len(ranges(server)) == 4 and seconds < 20


def test_reset_on_the_cdn_after_a_redirect_is_retried(server, drafter, tmp_path):
    with HubServer() as cdn:
        server.redirect_resolves_to(cdn)
        cdn.reset_connection_after("__cdn__", 10, method="GET")
        r, _ = inspect_sub(server, tmp_path)
        assert_inspected(r, drafter)
        assert [q.body_bytes for q in cdn.requests_for("__cdn__", "GET")] == [10, 4096]


# --- stalls -----------------------------------------------------------------------------------
def test_stalled_server_times_out_with_one_line(server, tmp_path):
    server.stall("", 30, times=None)
    r, seconds = inspect_sub(server, tmp_path, HF_HUB_DOWNLOAD_TIMEOUT="1")
    one_error_line(r, "timed out", "HF_HUB_DOWNLOAD_TIMEOUT", where=REPO)
    assert seconds < 8, seconds  # model_info: one request, 1 s limit


@pytest.mark.slow  # the client's whole backoff, waited out: 4-8 s
def test_stalled_header_reads_time_out_within_a_bound(server, tmp_path):
    server.stall(ST, 30, times=None, method="GET")
    r, seconds = inspect_sub(server, tmp_path, HF_HUB_DOWNLOAD_TIMEOUT="1")
    one_error_line(r, "timed out", where=f"{REPO}/{ST}")
    assert len(ranges(server)) == 4
    assert seconds < 15, seconds  # 4 x 1 s + 3.5 s of backoff (+ start-up)


def test_one_stall_then_the_retry_succeeds(server, drafter, tmp_path):
    server.stall(ST, 20, times=1, method="GET")
    r, seconds = inspect_sub(server, tmp_path, HF_HUB_DOWNLOAD_TIMEOUT="1")
    assert_inspected(r, drafter)
    assert seconds < 10, seconds


def test_stall_in_the_middle_of_a_header_body_is_retried(server, drafter, tmp_path):
    server.stall(ST, 20, times=1, method="GET", after_bytes=100)
    r, seconds = inspect_sub(server, tmp_path, HF_HUB_DOWNLOAD_TIMEOUT="1")
    assert_inspected(r, drafter)
    assert [g[2] for g in ranges(server)] == [100, 4096] and seconds < 10


def test_non_integer_timeout_is_a_one_line_error(server, tmp_path):
    """huggingface_hub 2.4 int()s HF_HUB_DOWNLOAD_TIMEOUT at import: '0.5' used to surface as
    'internal error: ValueError' (fixed in hub._hf)."""
    r, _ = inspect_sub(server, tmp_path, HF_HUB_DOWNLOAD_TIMEOUT="0.5")
    one_error_line(r, "HF_HUB_DOWNLOAD_TIMEOUT='0.5'", "whole number of seconds")
    assert server.requests == []


# --- redirects of LFS files to another host ---------------------------------------------------
def test_header_reads_follow_a_cdn_redirect_and_stay_small(server, drafter, tmp_path):
    with HubServer() as cdn:
        server.redirect_resolves_to(cdn)
        r, _ = inspect_sub(server, tmp_path)
        assert_inspected(r, drafter)
        hub_side = server.requests_for(ST, "GET")
        assert [q.status for q in hub_side] == [302] and server.bytes_by_file[(REPO, ST)] == 0
        size = os.path.getsize(drafter / ST)
        served = cdn.bytes_by_file[(REPO, ST)]
        assert 0 < served <= 8192 < size / 100, (served, size)
        assert all(q.range for q in cdn.requests_for("__cdn__", "GET"))


def test_compare_values_through_the_redirect(server, drafter, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    patch_hf_hub(monkeypatch, server.url, tmp_path / "home")
    with HubServer() as cdn:
        server.redirect_resolves_to(cdn)
        r = run_cli("compare", REPO, drafter, "--values", "--json")
        assert r.exit_code == 0, r
        j = r.json
        assert j["verdict"] == "identical"
        assert all(v["max_abs_diff"] == 0.0 for v in j["values"].values())
        size = os.path.getsize(drafter / ST)
        assert size <= cdn.bytes_by_file[(REPO, ST)] <= size + 8192  # whole file once, via the CDN
        assert server.bytes_by_file[(REPO, ST)] == 0


# --- what a server sends is checked before it is used -----------------------------------------
@pytest.mark.parametrize(
    "fname,fragment",
    [
        ("../../etc/passwd", "leaves the repository"),
        ("/etc/passwd", "leaves the repository"),
        ("../model.safetensors", "leaves the repository"),
        ("nope.safetensors", "not in the repository"),
    ],
)
def test_hub_index_names_are_checked_before_any_request(
    drafter, tmp_path, monkeypatch, fname, fragment
):
    with HubServer() as hub:
        files = repo_files(drafter)
        files["model.safetensors.index.json"] = json.dumps(
            {"weight_map": {"fc.weight": ST, "x": fname}}
        ).encode()
        hub.add_repo(REPO, files)
        patch_hf_hub(monkeypatch, hub.url, tmp_path / "home")
        r = run_cli("inspect", REPO)
        one_error_line(
            r,
            "refused" if "leaves" in fragment else fragment,
            fragment,
            where=f"{REPO}/model.safetensors.index.json",
        )
        assert not [q for q in hub.requests if "passwd" in q.path or "/../" in q.path]
        # refused before any header was read
        assert not [q for q in hub.requests_for(ST, "GET") if q.path.endswith("/" + ST)]


def test_hub_config_json_of_50_mb_is_refused_before_download(drafter, tmp_path, monkeypatch):
    with HubServer() as hub:
        files = repo_files(drafter)
        files["config.json"] = b'{"pad": "' + b"x" * (50_000_000 - 11) + b'"}'
        hub.add_repo(REPO, files)
        patch_hf_hub(monkeypatch, hub.url, tmp_path / "home")
        r = run_cli("inspect", REPO)
        one_error_line(r, "50000000 bytes", "more than", where=f"{REPO}/config.json")
        assert hub.bytes_by_file[(REPO, "config.json")] == 0  # was: downloaded, then refused
        assert hub.bytes_served < 100_000


def test_a_malformed_commit_sha_never_becomes_a_cache_path(server, tmp_path, monkeypatch):
    """model_info's sha names folders in our cache: a server answering '../../x' is refused
    before anything is written."""
    server.info_overrides["sha"] = "../../../../escaped"
    patch_hf_hub(monkeypatch, server.url, tmp_path / "home")
    home = os.environ["HF_HOME"]
    with OpenAudit() as audit:
        r = run_cli("inspect", REPO)
    one_error_line(r, "malformed commit sha", "refused", where=REPO)
    assert not [p for p, w in audit.opened if w], audit.opened
    assert not os.path.exists(os.path.join(home, "..", "..", "escaped"))
