"""``weightcheck eval`` on hidden states written by the producers' own code (issue #33: "tried as a
new user would on data you did not build for the tests"; docs/eval.md §1.3).

Opt-in (marker ``engine``): ``python -m pytest -m engine tests/test_eval_producers_own.py``.

SpecForge 0.2.0, side venv ``specforge-eval`` (tests/engine/setup_specforge_eval_venv.sh, which
also fetches ``scripts/prepare_hidden_states.py``, not in the wheel): tests/engine/
specforge_prepare_trial.py runs the script's ``main()`` on CPU for a tiny Llama target (a
transformers forward standing in for SGLang's model runner, the one part that needs CUDA) and
exports a drafter with SpecForge's ``export_to_sglang``. weightcheck evals the folder the script
wrote; SpecForge's own accuracy code (tests/engine/specforge_eval_oracle.py) reads the same files.

speculators 0.9.0, side venvs ``speculators`` and ``vllm``: a vLLM CPU server started with what
speculators' scripts/launch_vllm.py passes (``extract_hidden_states``, the
``ExampleHiddenStatesConnector``, layers [2, L//2, L-3, L]; its pinned-memory copy made a plain one,
tests/engine/vllm_cpu_hidden_states/sitecustomize.py), then ``speculators prepare-data`` (the
server renders the chat template) and ``speculators generate-offline-data``; weightcheck evals the
preprocessed folder.

Asserted: the files read are the files written, with the keys, shapes and dtypes docs/eval.md §1
says; the positions counted are the files' loss-mask positions (SpecForge) or, for speculators, those
of its Arrow dataset's ``loss_mask`` as speculators' own ``shift_batch`` and ``align_for_step``
align it (run in its venv); the per-step hits are SpecForge's own ``acc_k`` counts (float32) — for
speculators' files on a SpecForge-layout copy whose last hidden state is put through the target's
final norm (not all ones, so that applying it or not changes the top-1) and whose loss mask is
speculators' alignment of the Arrow mask.
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from conftest import ROOT, run_cli
from helpers.engine import side_env, side_python

pytestmark = pytest.mark.engine
torch = pytest.importorskip("torch")

ENGINE = ROOT / "tests" / "engine"
TRIAL = ENGINE / "specforge_prepare_trial.py"
STEPS = 3
LAYERS = 8  # the trial's target (specforge_prepare_trial.TARGET)
VLLM_IDS = [2, LAYERS // 2, LAYERS - 3, LAYERS]  # launch_vllm.py's default, with the last layer


def _prepare_script(python: str) -> str:
    p = os.environ.get("WEIGHTCHECK_SPECFORGE_PREPARE_SCRIPT") or os.path.join(
        os.path.dirname(os.path.dirname(python)), "specforge-scripts", "prepare_hidden_states.py"
    )
    if not os.path.isfile(p):
        pytest.skip(
            f"no SpecForge prepare_hidden_states.py: {p} is absent (run `bash "
            "tests/engine/setup_specforge_eval_venv.sh` or set WEIGHTCHECK_SPECFORGE_PREPARE_SCRIPT)"
        )
    return p


def _run(cmd, what: str, timeout: int = 600, **kw) -> subprocess.CompletedProcess:
    env = kw.pop("env", None) or dict(side_env(), TORCH_COMPILE_DISABLE="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, **kw)
    if p.returncode != 0:
        tail = "\n".join((p.stdout + "\n" + p.stderr).splitlines()[-40:])
        pytest.fail(f"{what} failed (exit {p.returncode}):\n{tail}")
    return p


def _json_line(p) -> dict:
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])


def _trial(python, script, work, *opts) -> dict:
    # the script is run from a copy beside the work: it caches its dataset next to itself
    copy = pathlib.Path(work).parent / f"{pathlib.Path(work).name}-scripts" / "prepare.py"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(pathlib.Path(script).read_bytes())
    p = _run([python, str(TRIAL), str(copy), str(work), *opts], "SpecForge's prepare_hidden_states")
    return {"work": str(work), **_json_line(p)}


def _oracle(python, drafter, target, data) -> dict:
    """SpecForge's own acc_k counts over DATA (float32)."""
    oracle = ENGINE / "specforge_eval_oracle.py"
    cmd = [python, str(oracle), drafter, target, str(data), str(STEPS), "float32"]
    return _json_line(_run(cmd, "SpecForge's accuracy"))


def _eval(*args) -> dict:
    r = run_cli("eval", *map(str, args), "--steps", STEPS, "--dtype", "float32", "--json")
    assert r.exit_code == 0, r
    return r.json


def _load(path: str) -> dict:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return torch.load(f, weights_only=True)
    return torch.load(path, weights_only=True)


def _specforge_files(data) -> list[str]:
    """SpecForge's order: every .ckpt / .ckpt.gz below, sorted by path (list_feature_files)."""
    return sorted(
        str(p) for p in pathlib.Path(data).rglob("*") if p.name.endswith((".ckpt", ".ckpt.gz"))
    )


def _counted(masks) -> list[int]:
    """Per step k, the columns SpecForge counts: loss_mask[t+k] with each file's last cleared."""
    out = [0] * STEPS
    for m in masks:
        lm = m.clone().long()
        lm[-1] = 0
        for k in range(STEPS):
            out[k] += int(lm[k:].sum())
    return out


@pytest.fixture(scope="module")
def specforge(tmp_path_factory):
    py = side_python("specforge-eval")
    script = _prepare_script(py)
    root = tmp_path_factory.mktemp("producers-own")
    plain = _trial(py, script, root / "plain")
    # 26 conversations, batches of 3 (the last, short, dropped: drop_last), groups of 5, gzip
    gz = _trial(
        py, script, root / "gz", "--compress", "--file-group-size", "5", "--batch-size", "3"
    )
    return {"python": py, "plain": plain, "gz": gz}


def _paths(t: dict) -> tuple[str, str, str]:
    w = t["work"]
    return os.path.join(w, "drafter"), os.path.join(w, "hidden-states"), os.path.join(w, "target")


def test_specforge_writes_what_docs_say(specforge):
    plain, gz = specforge["plain"], specforge["gz"]
    # the aux layers SpecForge's plan captured: the target's default [1, L/2-1, L-4] (no
    # eagle_config in the draft config), SGLang's ids (the output of layer i)
    assert plain["capture_layers"] == [1, LAYERS // 2 - 1, LAYERS - 4]
    written = [f for f in plain["files"] if f.startswith("rows_")]
    assert written == sorted(f"rows_0-2000/data_{i}.ckpt" for i in range(24)), written
    assert "vocab_mapping/vocab_mapping.pt" in plain["files"]
    assert plain["log"] == ["Generation loop finished. Processed: 24, Skipped: 0"]
    groups = {f.split("/")[0] for f in gz["files"] if f.startswith("rows_")}
    assert groups == {f"rows_{a}-{a + 5}" for a in range(0, 24, 5)}
    assert all(f.endswith(".ckpt.gz") for f in gz["files"] if f.startswith("rows_"))
    for path in _specforge_files(_paths(plain)[1]) + _specforge_files(_paths(gz)[1])[:3]:
        d = _load(path)
        assert set(d) == {"input_ids", "loss_mask", "aux_hidden_state", "hidden_state"}, path
        S = d["input_ids"].shape[0]
        assert d["input_ids"].dtype == d["loss_mask"].dtype == torch.int64
        assert tuple(d["loss_mask"].shape) == (S,)
        assert tuple(d["aux_hidden_state"].shape) == (1, S, 3 * 64)
        assert tuple(d["hidden_state"].shape) == (1, S, 64)
        assert d["aux_hidden_state"].dtype == d["hidden_state"].dtype == torch.bfloat16


@pytest.mark.parametrize("variant", ["plain", "gz"])
def test_eval_counts_specforges_positions_and_hits(specforge, variant):
    drafter, data, target = _paths(specforge[variant])
    files = _specforge_files(data)
    counted = _counted(_load(f)["loss_mask"] for f in files)
    theirs = _oracle(specforge["python"], drafter, target, data)
    r = _eval(drafter, "--hidden-states", data, "--target", target)
    assert r["data"]["format"] == "specforge" and r["data"]["files"] == len(files)
    steps = r["drafters"][0]["steps"]
    print(variant, "counted", counted, "SpecForge", theirs, "weightcheck", steps)
    assert [s["trained_valid"] for s in steps] == counted == [int(x) for x in theirs["denoms"]]
    assert [s["trained_hits"] for s in steps] == [int(x) for x in theirs["corrects"]]
    # the drafter hits at every step, hundreds of times at step 0: not a 0 == 0 proof
    assert steps[0]["trained_hits"] >= 200 and all(s["trained_hits"] >= 20 for s in steps)


def test_limit_sample_and_device_on_specforges_files(specforge):
    drafter, data, target = _paths(specforge["plain"])
    files = _specforge_files(data)
    r = _eval(drafter, "--hidden-states", data, "--target", target, "--limit", 5)
    assert r["data"]["files"] == 5 and r["data"]["selection"] == "limit"
    first5 = _counted(_load(f)["loss_mask"] for f in files[:5])  # SpecForge's order, by path
    assert [s["trained_valid"] for s in r["drafters"][0]["steps"]] == first5
    r = _eval(drafter, "--hidden-states", data, "--target", target, "--sample", 7, "--seed", 3)
    assert r["data"]["files"] == 7 and r["data"]["selection"] == "sample"
    assert (
        0
        < r["drafters"][0]["steps"][0]["trained_valid"]
        < _counted(_load(f)["loss_mask"] for f in files)[0]
    )
    # the engines' dtype (the config's bfloat16), text output, on the CPU
    t = run_cli("eval", drafter, "--hidden-states", data, "--target", target, "--device", "cpu")
    assert t.exit_code == 0 and "(specforge, 24 samples)" in t.stdout, t


# -- speculators -----------------------------------------------------------------------------------
def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(python, target, hs_dir, log) -> tuple[subprocess.Popen, str]:
    """vLLM's OpenAI server (CPU) as launch_vllm.py starts it; ``vllm serve`` itself stops at
    ``importlib.metadata.version("vllm")`` (the CPU build's distribution is vllm_cpu)."""
    port = _port()
    spec = {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": VLLM_IDS}},
    }
    kv = {
        "kv_connector": "ExampleHiddenStatesConnector",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": str(hs_dir)},
    }
    env = dict(side_env(), PYTHONPATH=str(ENGINE / "vllm_cpu_hidden_states"))
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env["TOKENIZERS_PARALLELISM"] = "false"
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target)]
    cmd += ["--speculative_config", json.dumps(spec), "--kv_transfer_config", json.dumps(kv)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--max-model-len", "1024"]
    cmd += ["--enforce-eager", "--dtype", "bfloat16", "--enable-scale-out"]  # render: prepare-data
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if proc.poll() is not None:
            break
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=2).read()
            return proc, url
        except OSError:
            time.sleep(1)
    _stop(proc)
    tail = "\n".join(pathlib.Path(log).read_text().splitlines()[-30:])
    pytest.fail(f"the vLLM server did not start:\n{tail}")


def _stop(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def speculators(specforge, tmp_path_factory):
    vllm = side_python("vllm")
    sp = side_python("speculators")
    cli = os.path.join(os.path.dirname(sp), "speculators")
    work = specforge["plain"]["work"]
    target = os.path.join(work, "target")
    root = tmp_path_factory.mktemp("speculators-own")
    pre = root / "pre"
    proc, url = _serve(vllm, target, root / "vllm-hs", root / "server.log")
    try:
        _run([cli, "prepare-data", "--model", target, "--data",
              os.path.join(work, "conversations.jsonl"), "--render-endpoint", url,
              "--output", str(pre), "--seq-length", "512",
              "--num-preprocessing-workers", "1"], "speculators prepare-data")  # fmt: skip
        _run([cli, "generate-offline-data", "--model", target, "--preprocessed-data", str(pre),
              "--endpoint", url + "/v1", "--concurrency", "2"],
             "speculators generate-offline-data")  # fmt: skip
    finally:
        _stop(proc)
    rows = _run(
        [
            sp,
            "-c",
            f"from datasets import load_from_disk; print(len(load_from_disk({str(pre)!r})))",
        ],
        "load_from_disk",
    )
    return {"pre": pre, "target": target, "rows": int(rows.stdout.split()[-1]), "work": work}


def test_speculators_writes_what_docs_say(specforge, speculators):
    from safetensors.torch import load_file

    hs = sorted((speculators["pre"] / "hidden_states").iterdir())
    assert sorted(p.name for p in hs) == sorted(
        f"hs_{i}.safetensors" for i in range(speculators["rows"])
    )
    for p in hs:
        d = load_file(str(p))
        assert set(d) == {"token_ids", "hidden_states"}
        S = d["token_ids"].shape[0]
        assert d["token_ids"].dtype == torch.int64
        assert tuple(d["hidden_states"].shape) == (S, len(VLLM_IDS), 64)
        assert d["hidden_states"].dtype == torch.bfloat16
    # vLLM's ids: id j the input of decoder layer j, id L the last layer's output before the final
    # norm (the transformers forward of the same target, within bfloat16 rounding)
    cmd = [specforge["python"], str(TRIAL), "check-vllm-slots", str(hs[0]),
           speculators["target"], ",".join(map(str, VLLM_IDS))]  # fmt: skip
    slots = _json_line(_run(cmd, "the slots' check"))
    tol = 0.02 * slots["scale"]
    for s in slots["slots"][:-1]:
        assert s["input_of_layer"] <= tol, slots
    last = slots["slots"][-1]
    assert last["before_norm"] <= tol < last["after_norm"], slots


SPECULATORS_COUNTS = r"""
import json, sys, torch
from datasets import load_from_disk
from speculators.models.eagle3.data import shift_batch
from speculators.models.eagle3.metrics import align_for_step
masks = [[int(v) for v in r] for r in load_from_disk(sys.argv[1]).with_format(None)["loss_mask"]]
steps, totals = int(sys.argv[2]), [0] * int(sys.argv[2])
for m in masks:  # speculators' own alignment of the mask: shift_batch, then each step's
    S = len(m)
    b = shift_batch({"input_ids": torch.zeros(S, dtype=torch.long),
                     "hidden_states": torch.zeros(S, 1), "verifier_last_hidden_states": torch.zeros(S, 1),
                     "loss_mask": torch.tensor(m), "lengths": torch.tensor([S]),
                     "position_ids": torch.arange(S)})
    for k in range(steps):
        n = b["loss_mask"].shape[0]
        z = torch.zeros(1, n, 1)
        _, _, lm, _ = align_for_step(z, z, b["loss_mask"][None], None, k)
        totals[k] += int(lm.sum())
print(json.dumps({"masks": masks, "totals": totals}))
"""


def test_eval_counts_speculators_positions_by_its_arrow_mask_and_specforges_hits(
    specforge, speculators
):
    from safetensors.torch import load_file

    pre, target = speculators["pre"], speculators["target"]
    drafter = os.path.join(speculators["work"], "drafter")
    files = sorted((pre / "hidden_states").glob("hs_*.safetensors"), key=lambda p: int(p.stem[3:]))
    r = _eval(drafter, "--hidden-states", pre, "--target", target)
    assert r["data"]["format"] == "speculators" and r["data"]["files"] == len(files)
    assert r["data"]["loss_mask"] == "arrow" and r["data"]["loss_mask_from"] == str(pre)
    # the mask as datasets reads it, and the positions speculators' own alignment counts
    sp = _json_line(_run([side_python("speculators"), "-c", SPECULATORS_COUNTS, str(pre),
                          str(STEPS)], "speculators' alignment"))  # fmt: skip
    # a SpecForge-layout copy: aux the first three slots, hidden_state the last through the
    # target's final norm (float32), loss_mask speculators' alignment of the Arrow mask (column t
    # counts by loss_mask[t+1]: shift_batch)
    w = load_file(os.path.join(target, "model.safetensors"))["model.norm.weight"].float()
    assert not torch.equal(w, torch.ones_like(w))
    eps = json.loads(pathlib.Path(target, "config.json").read_text())["rms_norm_eps"]
    copy = pre.parent / "as-specforge" / "rows_0-2000"
    copy.mkdir(parents=True)
    masks = []
    for i, f in enumerate(files):
        d = load_file(str(f))
        hs, S = d["hidden_states"], d["token_ids"].shape[0]
        assert len(sp["masks"][i]) == S
        last = hs[:, -1].float()
        normed = last * torch.rsqrt(last.pow(2).mean(-1, keepdim=True) + eps) * w
        masks.append(torch.tensor(sp["masks"][i][1:] + [0], dtype=torch.long))
        torch.save(
            {
                "input_ids": d["token_ids"],
                "loss_mask": masks[-1],
                "aux_hidden_state": hs[:, :-1].flatten(1).float()[None].contiguous(),
                "hidden_state": normed[None].contiguous(),
            },
            copy / f"data_{i}.ckpt",
        )
    theirs = _oracle(specforge["python"], drafter, target, copy.parent)
    steps = r["drafters"][0]["steps"]
    unshifted = _counted(torch.tensor(m) for m in sp["masks"])  # the mask taken as SpecForge's
    print("speculators' own counts", sp["totals"], "the Arrow mask unshifted", unshifted,
          "SpecForge on the copy", theirs, "weightcheck", steps)  # fmt: skip
    assert [s["trained_valid"] for s in steps] == sp["totals"] == _counted(masks)
    assert [s["trained_valid"] for s in steps] == [int(x) for x in theirs["denoms"]]
    assert [s["trained_hits"] for s in steps] == [int(x) for x in theirs["corrects"]]
    assert steps[0]["trained_hits"] >= 200 and all(s["trained_hits"] >= 20 for s in steps)
    # the Arrow mask read as SpecForge's own (unshifted): other positions, as many less as rows
    # whose mask reaches the last position (what the same copy counts with l in place of l[1:])
    plain = pre.parent / "as-specforge-unshifted" / "rows_0-2000"
    plain.mkdir(parents=True)
    for i, f in enumerate(sorted(copy.iterdir(), key=lambda p: int(p.stem[5:]))):
        d = torch.load(f, weights_only=True)
        torch.save(dict(d, loss_mask=torch.tensor(sp["masks"][i])), plain / f.name)
    u = _eval(drafter, "--hidden-states", plain.parent, "--target", target)["drafters"][0]
    print("unshifted: weightcheck", u["steps"])
    assert [s["trained_valid"] for s in u["steps"]] == unshifted != sp["totals"]
    # fewer positions than the files hold: the prompts are out
    assert steps[0]["trained_valid"] < sum(len(m) - 1 for m in sp["masks"])
    # without the dataset: every position counts, and the note says so
    bare = pre.parent / "bare"
    (bare / "hidden_states").mkdir(parents=True)
    for f in files:
        (bare / "hidden_states" / f.name).symlink_to(f)
    r = _eval(drafter, "--hidden-states", bare, "--target", target)
    assert r["data"]["loss_mask"] == "none" and "every position counts" in r["data"]["note"]
    assert r["drafters"][0]["steps"][0]["trained_valid"] == sum(len(m) - 1 for m in sp["masks"])
