"""Import stub for ``vllm`` in the SGLang oracle's side venv (never the project's Python).

Only ``vllm._custom_ops.rotary_embedding`` exists. SGLang 0.5.23 imports it in the rotary
embedding's constructor when the platform is neither CUDA, HIP, XPU, NPU, MUSA nor its CPU engine
(python/sglang/srt/layers/rotary_embedding/base.py ``RotaryEmbedding.__init__``), i.e. on this
CPU-only machine with ``SGLANG_USE_CPU_ENGINE`` off (no CPU build of sgl_kernel is published).
It is called only in a forward pass, which the oracle never runs. Every other ``vllm.*`` import
still fails with ImportError, as without vllm.
"""

__version__ = "0.0.0+weightcheck.stub"
WEIGHTCHECK_STUB = True
