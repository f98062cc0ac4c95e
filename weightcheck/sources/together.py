"""Reads that do not depend on each other, at once: each call on its own thread, so that their
waits on the network overlap (two Hub sources of ``compare``, their two d2t maps)."""

from __future__ import annotations


def at_once(*calls, threads: bool = True) -> list:
    """The results of ``calls`` (callables without arguments), run at once, in order. An error is
    the one running them one after the other would give: the first call's first. ``threads``
    false: one after the other (nothing to wait for on a network: local files)."""
    if len(calls) < 2 or not threads:
        return [c() for c in calls]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(c) for c in calls]
        return [f.result() for f in futures]
