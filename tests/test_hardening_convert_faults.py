"""Hardening, part 3: faults while ``weightcheck convert`` writes (docs/reliability.md).

``convert`` writes into ``.OUT.weightcheck-tmp-<pid>`` beside OUT, verifies, then renames. The
promise tested here, in real processes (``python -m weightcheck convert``):

* killed (SIGKILL) at any moment: OUT is absent or complete (``compare SRC OUT`` says identical,
  every tensor byte-equal), never partial; SRC's bytes never change; the next run removes the
  killed run's temporary folder;
* interrupted (SIGTERM): the same, and the process removes its temporary folder itself;
* disk full, a read-only destination, two converts racing for one OUT: exit 2, one line, nothing
  left behind, OUT complete or absent.

Deterministic faults at exact points (right after a rename) run weightcheck through
``tests/helpers/hardening.py`` as a script, which wraps ``os.rename``; weightcheck is unchanged.
The four convert.py bugs these tests found (docs/reliability.md, bugs 11-14) are fixed; their
tests now pass as ordinary tests.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
import stress
import synth
from conftest import ROOT, run_cli
from helpers.bad_input import one_error_line
from helpers.convert import TMP_MARK, leftovers
from helpers.hardening import fill, remount, run_injected, tmpfs

KILL_TRIALS = stress.count(48, 6)
TERM_TRIALS = stress.count(12, 4)
OUTCOMES: dict[str, collections.Counter] = {}  # printed with -s; docs/reliability.md


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def tree_state(folder) -> dict:
    """name -> (size, mtime_ns) of every file in SRC: cheap enough to check after each trial."""
    return {
        n: (os.stat(folder / n).st_size, os.stat(folder / n).st_mtime_ns)
        for n in sorted(os.listdir(folder))
    }


@pytest.fixture(scope="session")
def big_src(tmp_path_factory):
    """A ~219 MB synthetic drafter (Kimi-K2 SpecForge layout scaled to hidden 2048), written
    once per session; with its sha256."""
    from conftest import K2, load_config

    cfg = synth.scaled_config(
        load_config(K2),
        hidden=2048,
        intermediate=5632,
        heads=16,
        head_dim=128,
        vocab=32000,
        draft_vocab=16000,
    )
    folder = tmp_path_factory.mktemp("big") / "src"
    path = synth.write_drafter(str(folder), cfg)
    size = os.path.getsize(path)
    assert 100e6 < size < 300e6, size
    yield folder, sha256(path)
    shutil.rmtree(folder)  # do not keep 219 MB in pytest's retained tmp folders


def convert_cmd(src, out, *extra):
    return [
        sys.executable,
        "-m",
        "weightcheck",
        "convert",
        str(src),
        str(out),
        "--to",
        "sglang",
        "--json",
        *extra,
    ]


def assert_complete(src, out) -> None:
    """OUT is a whole, verified conversion of SRC: the files a convert writes, nothing else, and
    compare says identical with every tensor's bytes equal."""
    assert sorted(os.listdir(out)) == ["README.md", "config.json", "model.safetensors"], os.listdir(
        out
    )
    json.loads((out / "config.json").read_text())
    r = run_cli("compare", src, out, "--json")
    assert r.exit_code == 0, r
    j = r.json
    assert j["verdict"] == "identical", j["reasons"]
    assert j["bytes"]["different"] == 0 and j["bytes"]["not_compared"] == 0
    assert j["bytes"]["equal"] == len(j["tensors"]) > 0


def link_copy(ref, out) -> None:
    """A complete OUT in no time: hard links to a reference output (convert only renames and
    unlinks OUT's files, so the reference stays intact)."""
    shutil.copytree(ref, out, copy_function=os.link)


# =============================================================================================
# SIGKILL and SIGTERM at moments spread over a run (the exact points are tested further down)
def _trials(big_src, tmp_path, sig, trials, seed):
    """Each trial checks the invariants (SRC untouched; OUT absent or complete; SIGTERM never
    leaves its temporary folder); the spread of outcomes is asserted at the full counts only, where
    it no longer depends on how loaded the machine is."""
    src, digest = big_src
    before = tree_state(src)
    parent = tmp_path / "dest"
    parent.mkdir()
    out = parent / "OUT"
    ref = tmp_path / "ref"
    t0 = time.monotonic()
    p = subprocess.run(convert_cmd(src, ref), capture_output=True, text=True, cwd=ROOT)
    full = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert_complete(src, ref)
    rng = random.Random(seed)
    seen = collections.Counter()
    for i in range(trials):
        force = i % 3 == 2  # a third replace an existing OUT with --force
        if force and not out.exists():
            link_copy(ref, out)
        # stratified: trial i falls in the i-th slice of the run, at a seeded place within it
        delay = 0.05 + full * 1.15 * (i + rng.random()) / trials
        proc = subprocess.Popen(
            convert_cmd(src, out, *(["--force"] if force else [])),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        time.sleep(delay)
        proc.send_signal(sig)
        err = proc.communicate(timeout=60)[1]
        rc = proc.returncode
        own_tmp = parent / f".OUT{TMP_MARK}{proc.pid}"
        seen[f"exit {rc}"] += 1
        if own_tmp.exists():
            seen["left its temporary folder"] += 1
        if out.exists():
            assert_complete(src, out)
            seen["OUT complete" + (" (--force)" if force else "")] += 1
        else:
            seen["OUT absent" + (" (--force)" if force else "")] += 1
        if sig == signal.SIGTERM:
            assert rc in (0, 2, -signal.SIGTERM), (rc, err)
            if rc == 2:
                one_error_line(_Res(2, "", err), "interrupted by signal 15")
            assert not own_tmp.exists(), "SIGTERM left the temporary folder behind"
        else:
            assert rc in (0, -signal.SIGKILL), (rc, err)
        assert tree_state(src) == before, "SRC was modified"
        if out.exists() and not (i + 1) % 3 == 2:
            shutil.rmtree(out)  # plain trials start without OUT (else: "exists", nothing to test)
    # a later run cleans what the killed runs left
    killed_tmps = [e for e in leftovers(parent) if e.startswith(f".OUT{TMP_MARK}")]
    if out.exists():
        shutil.rmtree(out)
    # --force: a kill that fell between a --force run's two renames left the old OUT set aside,
    # and this run's clean-up puts it back as OUT first
    p = subprocess.run(convert_cmd(src, out, "--force"), capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert_complete(src, out)
    assert not [e for e in leftovers(parent) if e.startswith(f".OUT{TMP_MARK}")], leftovers(parent)
    assert sha256(src / "model.safetensors") == digest
    seen["temporary folders found before the final run"] = len(killed_tmps)
    shutil.rmtree(parent)
    shutil.rmtree(ref)
    return seen, full


class _Res:
    def __init__(self, code, out, err):
        self.exit_code, self.stdout, self.stderr = code, out, err


@pytest.mark.stress
def test_sigkill_at_random_moments_never_leaves_a_partial_out(big_src, tmp_path):
    seen, full = _trials(big_src, tmp_path, signal.SIGKILL, KILL_TRIALS, seed=20261202)
    OUTCOMES["SIGKILL"] = seen
    print(f"\nSIGKILL x{KILL_TRIALS} (a full convert takes {full:.2f} s): {dict(seen)}")
    if not stress.FULL:
        return
    # the delays really spread over the run: some kills landed while writing (a temporary folder
    # was left), some after OUT was published
    assert seen["left its temporary folder"] >= 5, seen
    assert seen["OUT absent"] >= 5, seen
    assert seen["OUT complete"] + seen["OUT complete (--force)"] >= 3, seen


@pytest.mark.stress
def test_sigterm_at_random_moments_cleans_up_itself(big_src, tmp_path):
    seen, full = _trials(big_src, tmp_path, signal.SIGTERM, TERM_TRIALS, seed=7)
    OUTCOMES["SIGTERM"] = seen
    print(f"\nSIGTERM x{TERM_TRIALS}: {dict(seen)}")
    assert seen["left its temporary folder"] == 0
    if stress.FULL:
        assert seen["exit 2"] >= 3, seen  # interrupted while writing, and said so


# the same signals at exact points of a run: mkdir of the temporary folder, the first, a middle
# and the last byte-range copy, the config and the model card being written
EXACT_POINTS = ["mkdir", "copy:1", "copy:10", "open:config.json", "open:README.md"]


@pytest.mark.parametrize("point", EXACT_POINTS)
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_signal_at_an_exact_point(big_src, tmp_path, point, sig):
    src, digest = big_src
    before = tree_state(src)
    parent = tmp_path / "dest"
    parent.mkdir()
    out = parent / "OUT"
    env = {"INJECT_SIGNAL": sig, "INJECT_AT": point}
    p = run_injected("convert", src, out, "--to", "sglang", env=env)
    assert not out.exists(), "OUT appeared although the run was stopped before publishing"
    left = [e for e in leftovers(parent) if TMP_MARK in e]
    if sig == "SIGTERM":
        one_error_line(_Res(p.returncode, p.stdout, p.stderr), "interrupted by signal 15")
        assert not left, "SIGTERM left the temporary folder behind"
    else:
        assert p.returncode == -signal.SIGKILL, p.stderr
        assert len(left) == 1, left  # the killed run's folder, for the next run to remove
    assert tree_state(src) == before, "SRC was modified"
    # the next run into the same parent removes what the killed run left, and writes OUT
    p = subprocess.run(convert_cmd(src, out), capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert_complete(src, out)
    assert not [e for e in leftovers(parent) if TMP_MARK in e], leftovers(parent)
    assert sha256(src / "model.safetensors") == digest


# =============================================================================================
# faults at exact points
def _inject(src, out, *extra, after_from=None, after_to=None, sig="SIGKILL"):
    env = {"INJECT_SIGNAL": sig}
    if after_from:
        env["INJECT_AFTER_RENAME_FROM"] = str(after_from)
    if after_to:
        env["INJECT_AFTER_RENAME_TO"] = str(after_to)
    return run_injected("convert", src, out, "--to", "sglang", *extra, env=env)


@pytest.fixture
def small_src(make_drafter):
    return make_drafter("src")


def test_kill_right_after_publish_leaves_a_complete_out(small_src, tmp_path):
    out = tmp_path / "OUT"
    p = _inject(small_src, out, after_to=out)
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert_complete(small_src, out)
    assert leftovers(tmp_path) == []


def test_kill_while_replacing_out_with_force_loses_nothing_complete(small_src, tmp_path):
    """SIGKILL between moving the old OUT aside and renaming the new one in: OUT is absent (the
    promise: absent or complete), and both the old and the new output are still whole on disk."""
    out = tmp_path / "OUT"
    assert run_cli("convert", small_src, out, "--to", "sglang").exit_code == 0
    p = _inject(small_src, out, "--force", after_from=out, sig="SIGKILL")
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert not out.exists()
    left = leftovers(tmp_path)
    assert len(left) == 2, left  # the new output (temporary folder) and the old one, moved aside
    for e in left:
        assert_complete(small_src, tmp_path / e)


def test_a_later_run_cleans_up_after_a_kill_during_force(small_src, tmp_path):
    out = tmp_path / "OUT"
    assert run_cli("convert", small_src, out, "--to", "sglang").exit_code == 0
    _inject(small_src, out, "--force", after_from=out, sig="SIGKILL")
    r = run_cli("convert", small_src, out, "--to", "sglang", "--force")
    assert r.exit_code == 0, r
    assert_complete(small_src, out)
    assert leftovers(tmp_path) == [], leftovers(tmp_path)


def test_sigterm_while_replacing_out_keeps_out(small_src, tmp_path):
    out = tmp_path / "OUT"
    assert run_cli("convert", small_src, out, "--to", "sglang").exit_code == 0
    p = _inject(small_src, out, "--force", after_from=out, sig="SIGTERM")
    assert p.returncode in (0, 2), p.stderr
    assert out.exists(), f"OUT is gone: {leftovers(tmp_path)}; stderr: {p.stderr.strip()}"
    assert_complete(small_src, out)


def test_sigterm_right_after_publish_does_not_claim_nothing_was_written(small_src, tmp_path):
    out = tmp_path / "OUT"
    p = _inject(small_src, out, after_to=out, sig="SIGTERM")
    assert out.exists()
    assert_complete(small_src, out)
    assert p.returncode == 0 or "nothing written" not in p.stderr, p.stderr


def test_clean_stale_keeps_the_folder_of_a_process_it_may_not_signal(tmp_path, monkeypatch):
    """(The control -- a dead pid's folder goes, a live one of ours stays -- is
    tests/test_convert.py::test_stale_tmp_removed_live_one_kept.)"""
    from weightcheck.commands import convert as convert_mod

    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        live = tmp_path / f".OUT{TMP_MARK}{sleeper.pid}"
        live.mkdir()
        real_kill = os.kill

        def kill(pid, sig):  # what an unprivileged caller gets for another user's process
            if pid == sleeper.pid and sig == 0:
                raise PermissionError(1, "Operation not permitted")
            return real_kill(pid, sig)

        monkeypatch.setattr(os, "kill", kill)
        removed = convert_mod.clean_stale(str(tmp_path / "OUT"))
        assert live.exists(), f"removed a live process's folder: {removed}"
    finally:
        sleeper.kill()
        sleeper.wait()


# =============================================================================================
# disk full, read-only, racing converts
def _fsize_limit(nbytes):
    def pre():
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return pre


@pytest.mark.root
def test_disk_full_is_one_line_and_leaves_nothing(big_src, tmp_path):
    src, digest = big_src
    with tmpfs(tmp_path / "small", "20m") as small:
        if small is not None:  # a 20 MB filesystem for a 219 MB conversion
            out = small / "OUT"
            p = subprocess.run(convert_cmd(src, out), capture_output=True, text=True, cwd=ROOT)
            one_error_line(
                _Res(p.returncode, p.stdout, p.stderr),
                "cannot write",
                "No space left on device",
                where=out,
            )
            assert os.listdir(small) == []
            st = os.statvfs(small)
            assert st.f_bfree == st.f_blocks, "space still used after the failed convert"
            return
    # no mount here: a 10 MB file size limit (RLIMIT_FSIZE) instead
    out = tmp_path / "OUT"
    p = subprocess.run(
        convert_cmd(src, out),
        capture_output=True,
        text=True,
        cwd=ROOT,
        preexec_fn=_fsize_limit(10 << 20),
    )
    one_error_line(
        _Res(p.returncode, p.stdout, p.stderr), "cannot write", "File too large", where=out
    )
    assert leftovers(tmp_path) == [] and not out.exists()
    assert sha256(src / "model.safetensors") == digest


@pytest.mark.root
def test_disk_full_at_every_phase(small_src, tmp_path):
    """Free space swept around the shard's size: the shard fails, or config.json, or README.md,
    or everything fits. Each run ends complete or with one line and nothing left."""
    shard = os.path.getsize(small_src / "model.safetensors")
    page = 4096
    pages = -(-shard // page)
    with tmpfs(tmp_path / "small", "8m") as small:
        if small is None:
            pytest.skip("cannot mount a tmpfs here (the RLIMIT_FSIZE variant above still runs)")
        results = collections.Counter()
        for leave in [
            0,
            1,
            pages // 2,
            pages - 1,
            pages,
            pages + 1,
            pages + 2,
            pages + 3,
            pages + 6,
        ]:
            fill(small, leave * page)
            out = small / "OUT"
            r = run_cli("convert", small_src, out, "--to", "sglang")
            if r.exit_code == 0:
                assert_complete(small_src, out)
                results["complete"] += 1
                shutil.rmtree(out)
            else:
                one_error_line(r, "No space left on device", where=out)
                results["refused"] += 1
            assert os.listdir(small) == ["filler"], os.listdir(small)
            os.unlink(small / "filler")
        print(f"\ndisk full sweep (shard {pages} pages): {dict(results)}")
        assert results["complete"] >= 1 and results["refused"] >= 4, results
        OUTCOMES["disk full sweep"] = results


@pytest.mark.root
def test_read_only_destination(small_src, tmp_path):
    with tmpfs(tmp_path / "ro", "8m") as ro:
        if ro is None:
            pytest.skip("cannot mount a tmpfs here (root can write through chmod 555)")
        old = ro / "OLD"
        assert run_cli("convert", small_src, old, "--to", "sglang").exit_code == 0
        before = {n: sha256(old / n) for n in os.listdir(old)}
        remount(ro, readonly=True)
        try:
            new = ro / "NEW"
            one_error_line(
                run_cli("convert", small_src, new, "--to", "sglang"), "cannot write", where=new
            )
            one_error_line(
                run_cli("convert", small_src, old, "--to", "vllm", "--force"),
                "cannot write",
                where=old,
            )
            assert sorted(os.listdir(ro)) == ["OLD"]
            assert {n: sha256(old / n) for n in os.listdir(old)} == before
        finally:
            remount(ro, readonly=False)


def test_two_converts_racing_for_one_out(big_src, tmp_path):
    src, _ = big_src
    outcomes = collections.Counter()
    for round_ in range(2):
        parent = tmp_path / f"race{round_}"
        parent.mkdir()
        out = parent / "OUT"
        procs = [
            subprocess.Popen(
                convert_cmd(src, out),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            for _ in range(2)
        ]
        ended = {}
        while len(ended) < 2:
            for i, p in enumerate(procs):
                if i not in ended and p.poll() is not None:
                    ended[i] = time.monotonic()
            time.sleep(0.005)
        done = [(p.returncode, p.stderr.read(), ended[i]) for i, p in enumerate(procs)]
        assert sorted(c for c, _, _ in done) == [0, 2], done
        ((_, _, won_at),) = [d for d in done if d[0] == 0]
        ((_, loser, lost_at),) = [d for d in done if d[0] == 2]
        one_error_line(_Res(2, "", loser), "exists")
        # both passed the start-up check; the loser wrote and verified its copy, then found OUT
        outcomes["refused at publish" if lost_at >= won_at else "refused at the start"] += 1
        assert_complete(src, out)
        assert leftovers(parent) == []
        shutil.rmtree(parent)
    OUTCOMES["race"] = outcomes
    print(f"\nrace: {dict(outcomes)}")
