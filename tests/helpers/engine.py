"""Shared by the engine tests (marker ``engine``): the side venvs' interpreters and stdlib
rewriting of drafters into variants (no weightcheck code, so a variant is not shaped by the code
under test)."""

from __future__ import annotations

import json
import os
import pathlib
import struct
import subprocess

import pytest

# the Llama drafters written by the producers' own code (tests/fixtures/producers/README.md)
PRODUCER_FIXTURES = [
    "specforge-sglang",
    "specforge-hf",
    "speculators-train",
    "speculators-convert",
    "modelopt",
    "modelopt-default-aux",
    "modelopt-fullvocab-fp32",
]

SIDE_VENVS = {
    # engine: (the variable that names its interpreter, what it is, the script that builds it)
    "sglang": ("WEIGHTCHECK_SGLANG_PYTHON", "SGLang", "tests/engine/setup_sglang_venv.sh"),
    "vllm": ("WEIGHTCHECK_VLLM_PYTHON", "vLLM CPU", "tests/engine/setup_vllm_venv.sh"),
    # the trainers (tests/test_trainer_differential.py)
    "specforge": (
        "WEIGHTCHECK_SPECFORGE_PYTHON",
        "SpecForge",
        "tests/engine/setup_specforge_venv.sh",
    ),
    "speculators": (
        "WEIGHTCHECK_SPECULATORS_PYTHON",
        "speculators",
        "tests/engine/setup_speculators_venv.sh",
    ),
    # SpecForge with its training forward's imports (tests/test_eval_specforge.py and friends)
    "specforge-eval": (
        "WEIGHTCHECK_SPECFORGE_EVAL_PYTHON",
        "SpecForge eval",
        "tests/engine/setup_specforge_eval_venv.sh",
    ),
}


def side_python_path(engine: str) -> str:
    """Where the engine's side-venv interpreter is (it may not exist): its variable, else the venv
    its setup script builds under WEIGHTCHECK_VENVS or ~/.cache/weightcheck/venvs."""
    var = SIDE_VENVS[engine][0]
    p = os.environ.get(var)
    if p:
        return p
    venvs = os.environ.get("WEIGHTCHECK_VENVS") or os.path.expanduser("~/.cache/weightcheck/venvs")
    return os.path.join(venvs, engine, "bin", "python")


def side_python(engine: str) -> str:
    """The engine's side-venv interpreter, or skip, naming what to run."""
    var, what, script = SIDE_VENVS[engine]
    p = side_python_path(engine)
    if not (os.path.isfile(p) and os.access(p, os.X_OK)):
        pytest.skip(f"no {what} interpreter: {p} is absent (run `bash {script}` or set {var})")
    return p


def side_env() -> dict:
    """The environment of a side-venv process: offline, the venv's own packages only."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    return env


def serve_vllm(
    python: str,
    target,
    drafter,
    prompts,
    max_tokens: int,
    k: int = 3,
    cwd=None,
    timeout: int = 300,
    what: str = "vLLM run",
    record_drafts: bool = False,
) -> dict:
    """One run of tests/engine/serve_and_measure.py with the vLLM venv's ``python`` (greedy, ``k``
    speculative tokens): its result — the generated ids per prompt, vLLM's spec-decode counters,
    the aux layers vLLM used, timings, with ``record_drafts`` every chain drafted — with
    ``seconds.wall`` added. The test fails, with the
    end of the run's output, unless it printed a result."""
    import time

    script = pathlib.Path(__file__).resolve().parents[1] / "engine" / "serve_and_measure.py"
    cmd = [python, str(script), "--target", str(target), "--k", str(k)]
    cmd += ["--max-tokens", str(max_tokens), "--prompts", json.dumps(prompts)]
    if drafter is not None:
        cmd += ["--drafter", str(drafter)]
    if record_drafts:
        cmd.append("--record-drafts")
    env = side_env()
    env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    wall = time.time() - t
    mark = "WEIGHTCHECK_RESULT "
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(mark)]
    if p.returncode != 0 or not lines:
        tail = "\n".join((p.stdout + "\n" + p.stderr).splitlines()[-40:])
        pytest.fail(f"{what} failed (exit {p.returncode}):\n{tail}")
    r = json.loads(lines[-1][len(mark) :])
    r["seconds"]["wall"] = round(wall, 2)
    return r


# --- stdlib safetensors rewriting (the variants) --------------------------------------------------


def read_st(path: pathlib.Path) -> tuple[dict, dict[str, bytes], dict]:
    """(metadata, name -> raw bytes, name -> {dtype, shape}) in file (data offset) order."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    data, info = {}, {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, en = e["data_offsets"]
        data[name] = raw[base + b : base + en]
        info[name] = {"dtype": e["dtype"], "shape": e["shape"]}
    return meta, data, info


def write_st(path: pathlib.Path, meta: dict, data: dict[str, bytes], info: dict) -> None:
    """Header entries and data in the order of ``data``."""
    header, off = {}, 0
    if meta:
        header["__metadata__"] = meta
    for name, b in data.items():
        header[name] = {
            "dtype": info[name]["dtype"],
            "shape": info[name]["shape"],
            "data_offsets": [off, off + len(b)],
        }
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(data.values()))


def variant(
    src: pathlib.Path,
    out: pathlib.Path,
    rename=None,
    drop=(),
    add=None,
    first=None,
    config=None,
    drop_config=(),
):
    """A copy of drafter SRC with tensors renamed / dropped / added (``first``: added tensors go
    before the others in the file) and config keys set or removed."""
    out.mkdir(parents=True, exist_ok=True)
    meta, data, info = read_st(src / "model.safetensors")
    new_data, new_info = {}, {}
    for name, (dtype, shape, b) in (first or {}).items():
        new_data[name], new_info[name] = b, {"dtype": dtype, "shape": list(shape)}
    for name in data:
        if name in drop:
            continue
        nn = rename(name) if callable(rename) else (rename or {}).get(name, name)
        new_data[nn], new_info[nn] = data[name], info[name]
    for name, (dtype, shape, b) in (add or {}).items():
        new_data[name], new_info[name] = b, {"dtype": dtype, "shape": list(shape)}
    write_st(out / "model.safetensors", meta, new_data, new_info)
    cfg = json.loads((src / "config.json").read_text())
    for k in drop_config:
        cfg.pop(k, None)
    for k, v in (config or {}).items():
        cfg[k] = v
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out


# --- the oracle tests (tests/test_engine_oracles.py) ----------------------------------------------

ORACLE_SCRIPTS = {"sglang": "sglang_oracle.py", "vllm": "vllm_oracle.py"}
# the keys of an oracle's record of one drafter (tests/engine/oracle_common.py new_record), and of
# its config, parameters and keys
RECORD_KEYS = {
    "oracle",
    "engine_version",
    "drafter",
    "started",
    "stage",
    "error",
    "architecture",
    "config",
    "keys",
    "params",
    "d2t",
    "t2d",
}
CONFIG_KEYS = {
    "hidden_size",
    "num_hidden_layers",
    "vocab_size",
    "draft_vocab_size",
    "dtype",
    "aux_layer_ids",
    "aux_layer_ids_from",
    "captured_layers",
    "tie_word_embeddings",
}


def convert_copy(src: pathlib.Path, out: pathlib.Path, to: str, target: pathlib.Path):
    """``python -m weightcheck convert SRC OUT --to TO --target TARGET`` (a subprocess): the
    CompletedProcess."""
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "weightcheck", "convert", str(src), str(out), "--to", to]
    cmd += ["--target", str(target)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=str(root), timeout=300)


def run_oracle(engine: str, drafters: dict, root, args=(), timeout: int = 1200):
    """One run of tests/engine/<engine>_oracle.py in the engine's side venv over ``drafters``
    ({name: folder}): (records by name, wall seconds, the process). The test fails, with the
    end of the oracle's stderr, unless there is one record per drafter."""
    import subprocess
    import time

    names = list(drafters)
    script = pathlib.Path(__file__).resolve().parents[1] / "engine" / ORACLE_SCRIPTS[engine]
    cmd = [side_python(engine), str(script), *args, *[str(drafters[n]) for n in names]]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)  # the venv's own packages (and stubs) only
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=str(root))
    wall = time.time() - t
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or len(lines) != len(names):
        tail = "\n".join(p.stderr.splitlines()[-40:])
        pytest.fail(
            f"the oracle failed (exit {p.returncode}, {len(lines)}/{len(names)} records):\n{tail}"
        )
    by_path = {r["drafter"]: r for r in lines}
    return {n: by_path[str(drafters[n])] for n in names}, wall, p


def keep_oracle_report(engine: str, wall: float, stderr_tail: list, records: dict) -> None:
    """WEIGHTCHECK_ORACLE_REPORT=FILE: every record of ENGINE's oracle run in FILE.ENGINE.json."""
    report = os.environ.get("WEIGHTCHECK_ORACLE_REPORT")
    if report:
        with open(f"{report}.{engine}.json", "w") as f:
            json.dump(
                {"seconds": round(wall, 1), "stderr_tail": stderr_tail, "records": records},
                f,
                indent=1,
            )


def assert_record_schema(r: dict, fates: set, extra: set = frozenset()) -> None:
    """An oracle's record has the keys both oracles write (and ``extra``), its config, parameter
    and key entries theirs, each key's fate one of ``fates``."""
    assert set(r) == RECORD_KEYS | set(extra)
    assert set(r["config"]) == CONFIG_KEYS
    for v in r["params"].values():
        assert set(v) == {"shape", "state", "equals_checkpoint"}
    for v in r["keys"].values():
        assert set(v) == {"fate", "params"}
        assert v["fate"] in fates


def read_oracle_records(
    name: str, proc, jsonl: str, n: int, key: str, timeout: int, stall: int | None = None
) -> dict:
    """The JSON records an oracle process (``proc``, None when reused) wrote one a line to
    ``jsonl``, by ``key``; waits at most ``timeout`` s, and with ``stall`` at most that long
    without a new record (the process is then killed: SGLang's CPU loader was seen to hang on
    "Multi-thread loading shards 0/1" at one drafter of 2,000, twice; the caller starts it again
    for the drafters left). Raises, with the end of its stderr, unless it exited 0 with exactly
    ``n`` records (tests/engine/differential.py, trainer_differential.py)."""
    if proc is not None:
        _wait(proc, jsonl, timeout, stall)
    recs = {}
    if os.path.exists(jsonl):
        with open(jsonl) as f:
            for line in f:
                if line.startswith("{"):
                    r = json.loads(line)
                    recs[r[key]] = r
    if proc is not None and (proc.returncode != 0 or len(recs) != n):
        with open(jsonl + ".stderr") as f:
            tail = "".join(f.readlines()[-30:])
        raise RuntimeError(
            f"the {name} oracle failed (exit {proc.returncode}, {len(recs)}/{n} records):\n{tail}"
        )
    return recs


def _wait(proc, jsonl: str, timeout: int, stall: int | None) -> None:
    """Wait for ``proc``; kill it after ``timeout`` s, or after ``stall`` s in which ``jsonl``
    did not grow."""
    import time

    start = last = time.monotonic()
    size = -1
    while proc.poll() is None:
        now = time.monotonic()
        grown = os.path.getsize(jsonl) if os.path.exists(jsonl) else 0
        if grown != size:
            size, last = grown, now
        if now - start > timeout or (stall is not None and now - last > stall):
            proc.kill()
            proc.wait()
            return
        time.sleep(1.0)
