"""Helpers for the hardening tests (tests/test_hardening_*.py; figures in docs/reliability.md).

* ``OpenAudit``: every file a piece of code opens, seen through Python's audit hooks (the "open"
  event is raised by ``open``/``io.open``/``io.open_code``/``os.open``, whoever calls them).
* ``tmpfs``: a small tmpfs mounted for one test (needs root and CAP_SYS_ADMIN; yields None where
  mounting is not allowed, and the caller falls back or skips).
* the CLI's contract for a failure (exit 2, one line): helpers.bad_input.one_error_line.
* Run as a script, this file is ``weightcheck`` with a signal injected at an exact point:
  ``python tests/helpers/hardening.py convert SRC OUT ...`` with INJECT_SIGNAL (e.g. SIGKILL) and
  one of INJECT_AFTER_RENAME_FROM / INJECT_AFTER_RENAME_TO (a path: right after ``os.rename``
  moved that path, or onto it) or INJECT_AT: ``mkdir`` (right after the temporary folder is
  made), ``copy:N`` (right after the N-th ``os.copy_file_range`` call), ``open:NAME`` (right
  after NAME is opened for writing). Only the standard library's functions are wrapped; nothing
  in weightcheck is changed.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
import threading

ROOT = pathlib.Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# auditing opens
class OpenAudit:
    """Record (path, writing?) for every open while active. One audit hook per process (hooks
    cannot be removed), switched on and off; only the thread that switched it on is recorded."""

    _installed = False
    _active: "OpenAudit | None" = None

    def __init__(self):
        self.opened: list[tuple[str, bool]] = []
        self._thread = None

    @classmethod
    def _hook(cls, event, args):
        audit = cls._active
        if audit is None or event != "open" or threading.get_ident() != audit._thread:
            return
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        if isinstance(path, int) or path is None:  # an fd (os.fdopen): already opened
            return
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        writing = False
        if isinstance(mode, str):
            writing = any(c in mode for c in "wax+")
        if isinstance(flags, int):
            writing = writing or bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
        audit.opened.append((os.fspath(path), writing))

    def __enter__(self):
        if not OpenAudit._installed:
            sys.addaudithook(OpenAudit._hook)
            OpenAudit._installed = True
        self.opened.clear()
        self._thread = threading.get_ident()
        OpenAudit._active = self
        return self

    def __exit__(self, *exc):
        OpenAudit._active = None

    @staticmethod
    def _python_internal(real: str) -> bool:
        """Module and interpreter files (imports, certificates): not data the code under test
        chose to read."""
        roots = {
            sys.prefix,
            sys.base_prefix,
            sys.exec_prefix,
            str(ROOT / "weightcheck"),
            str(ROOT / "mappings"),
        }
        roots |= {p for p in sys.path if p and "site-packages" in p}
        return real.endswith((".py", ".pyc", ".so", ".pth")) or any(
            real == r or real.startswith(r.rstrip("/") + "/") for r in map(os.path.realpath, roots)
        )

    def outside(self, *allowed_roots, writes_only: bool = False) -> list[str]:
        """Opened paths (resolved: symlinks followed) in none of ``allowed_roots``."""
        roots = [os.path.realpath(r) for r in allowed_roots]
        bad = []
        for path, writing in self.opened:
            if writes_only and not writing:
                continue
            real = os.path.realpath(path)
            if any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
                continue
            if not writing and self._python_internal(real):
                continue
            bad.append(path)
        return bad


# ---------------------------------------------------------------------------------------------
# a small filesystem
@contextlib.contextmanager
def tmpfs(path, size: str = "20m", readonly: bool = False):
    """Mount a tmpfs of ``size`` at ``path`` for the block; yields the path, or None when this
    machine does not let us mount (then nothing was mounted). Always unmounted afterwards."""
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if readonly else "")
    try:
        p = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        yield None
        return
    if p.returncode != 0:
        yield None
        return
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=20)


def remount(path, readonly: bool) -> None:
    subprocess.run(
        ["mount", "-o", f"remount,{'ro' if readonly else 'rw'}", str(path)],
        check=True,
        capture_output=True,
        timeout=20,
    )


def fill(path, leave_bytes: int) -> None:
    """Write a file in ``path``'s filesystem until only about ``leave_bytes`` stay free."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    n = max(0, free - leave_bytes)
    with open(os.path.join(path, "filler"), "wb") as f:
        block = b"\0" * (1 << 20)
        while n > 0:
            k = f.write(block[: min(n, len(block))])
            n -= k


# ---------------------------------------------------------------------------------------------
# the CLI with a signal at an exact point (run as a script)
def _inject_main() -> None:
    import signal

    src = os.environ.get("INJECT_AFTER_RENAME_FROM")
    dst = os.environ.get("INJECT_AFTER_RENAME_TO")
    sig = getattr(signal, os.environ["INJECT_SIGNAL"])
    real_rename = os.rename

    def rename(a, b, *args, **kwargs):
        real_rename(a, b, *args, **kwargs)
        if (src and os.path.abspath(a) == os.path.abspath(src)) or (
            dst and os.path.abspath(b) == os.path.abspath(dst)
        ):
            os.kill(os.getpid(), sig)

    os.rename = rename
    at = os.environ.get("INJECT_AT", "")
    kind, _, arg = at.partition(":")
    if kind == "mkdir":
        real_makedirs = os.makedirs

        def makedirs(path, *a, **k):
            real_makedirs(path, *a, **k)
            if ".weightcheck-tmp-" in os.path.basename(os.fspath(path)):
                os.kill(os.getpid(), sig)

        os.makedirs = makedirs
    elif kind == "copy":
        real_copy = os.copy_file_range
        calls = [0]

        def copy_file_range(*a, **k):
            n = real_copy(*a, **k)
            calls[0] += 1
            if calls[0] == int(arg):
                os.kill(os.getpid(), sig)
            return n

        os.copy_file_range = copy_file_range
    elif kind == "open":
        import builtins

        real_open = builtins.open

        def open_(file, mode="r", *a, **k):
            f = real_open(file, mode, *a, **k)
            if (
                isinstance(file, (str, os.PathLike))
                and os.path.basename(os.fspath(file)) == arg
                and any(c in mode for c in "wax")
            ):
                os.kill(os.getpid(), sig)
            return f

        builtins.open = open_
    sys.path.insert(0, str(ROOT))
    from weightcheck.cli import main

    sys.argv = ["weightcheck", *sys.argv[1:]]
    main()


def run_injected(*args, env: dict, timeout: float = 120):
    """``python tests/helpers/hardening.py ARGS`` (weightcheck with the injected fault)."""
    e = dict(os.environ)
    e.update(env)
    p = subprocess.run(
        [sys.executable, __file__, *map(str, args)],
        capture_output=True,
        text=True,
        env=e,
        timeout=timeout,
        cwd=str(ROOT),
    )
    return p


if __name__ == "__main__":
    _inject_main()
