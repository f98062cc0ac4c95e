"""Stub of ``vllm._custom_ops`` for the SGLang oracle: names exist, calling them raises."""


def rotary_embedding(*args, **kwargs):
    raise RuntimeError("vllm._custom_ops is a stub in this venv (weightcheck SGLang oracle)")
