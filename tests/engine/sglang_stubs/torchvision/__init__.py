"""Import stub for ``torchvision`` in the SGLang oracle's side venv (never the project's Python).

Why: SGLang 0.5.23 imports torchvision at module level in its multimodal helpers (e.g.
python/sglang/srt/multimodal/internvl_utils.py, configs/deepseek_ocr.py), which the model
registry reaches when it imports every model module. The registry's torchvision wheels are CUDA
builds: with the CPU torch 2.13 they fail at import (``operator torchvision::nms does not exist``).
Nothing on the EAGLE-3 weight-loading path calls torchvision.

What it does: ``torchvision`` and every ``torchvision.<sub>`` import succeed; any attribute is a
placeholder class (so ``InterpolationMode.BICUBIC`` in a default argument works), and calling or
instantiating it raises. There is no dist-info, so transformers' ``is_torchvision_available()``
stays False.
"""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+weightcheck.stub"
WEIGHTCHECK_STUB = True


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return cls

    def __call__(cls, *args, **kwargs):
        raise RuntimeError("torchvision is a stub in this venv (weightcheck SGLang oracle)")


class _Placeholder(metaclass=_Meta):
    pass


def _module_getattr(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.__getattr__ = _module_getattr
        return m

    def exec_module(self, module):
        pass


__getattr__ = _module_getattr
sys.meta_path.insert(0, _StubFinder())
