"""Ctrl-C held over what cannot be interrupted safely: torch's import (docs/eval.md §7).

``import torch`` is not safe to interrupt. Of 40 SIGINTs sent to ``python -c "import torch"`` at
0.1-1.0 s (torch 2.13, the build machine), 34 ended it with a KeyboardInterrupt, 4 were swallowed
(the import went on and the program ran to its end, the Ctrl-C lost) and 2 aborted the process
(SIGABRT, no message). eval would then run on, or die without a word. :func:`held` keeps a Ctrl-C
that comes during the block and raises it as a KeyboardInterrupt once the block is done, where the
program handles it (nothing evaluated yet: ``weightcheck: interrupted``, exit 130).
"""

from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def held():
    """Run the block with Ctrl-C (SIGINT) kept, then raise it. Only where Python's own handler is
    in place, in the main thread: a program that handles SIGINT itself keeps its handler."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if seen:
        raise KeyboardInterrupt
