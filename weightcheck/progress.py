"""A progress line on stderr for work that reads or writes weights (convert, check --values,
compare --values): huggingface_hub's tqdm (no dependency of our own), drawn only when stderr is
a terminal — in a pipe or a file nothing is written, never a ``\\r`` — and only for work that
takes longer than ``delay`` seconds."""

from __future__ import annotations

import sys

from weightcheck.terminal import isatty


class Progress:
    """``update(n)`` adds n of ``total`` (bytes, or ``unit``s); ``close()`` clears the line."""

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        stream=None,
        enabled=None,
        delay: float = 0.5,
        unit: str = "B",
    ):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = isatty(self.stream) if enabled is None else enabled
        self.desc, self.total, self.done = desc, total, 0
        self._bar = None
        if self.enabled:
            # huggingface_hub's tqdm (it honours HF_HUB_DISABLE_PROGRESS_BARS), imported only
            # when a bar can be drawn: the import costs ~100 ms (tqdm reads its version through
            # importlib.metadata), more than a header-level command takes
            from huggingface_hub.utils import tqdm

            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                unit_scale=unit == "B",
                file=self.stream,
                delay=delay,
                leave=False,
                dynamic_ncols=True,
            )

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def step(self, i: int, n: int) -> None:
        """Item ``i`` of ``n`` done (the total is known once the work has started)."""
        if self._bar is not None and self._bar.total != n:
            self._bar.total = n
        self.update(i - self.done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
