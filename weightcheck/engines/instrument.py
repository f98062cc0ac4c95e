"""The instrumentation of an engine's own drafter loader: every parameter's ``weight_loader``
wrapped to record which checkpoint tensor wrote it (and which shard), which one it refused, and
the engine's log warnings while each tensor loads.

One module for the three places that run an engine's loader: ``check --live`` (live.py) and the
two oracles of the differential test (tests/engine/sglang_oracle.py, vllm_oracle.py). The oracles
run in the engines' side venvs, where weightcheck is not installed: they load this file by its
path (tests/engine/oracle_common.py). So it imports the standard library only (tests/test_layers.py
holds it to that); torch is whatever the caller's hooks use.

A checkpoint tensor is known by its *key*: the name the engine's weight iterator yielded it
under. The caller tags each tensor it feeds (:func:`tag`) or sets :attr:`LoaderLog.current` while
the loading code holds it; a tensor the loader builds itself (a slice, a concatenation) carries no
tag.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

TAG = "_weightcheck_key"  # the attribute a fed tensor carries its key in


def caused_by(e: BaseException, inner: BaseException) -> bool:
    """``inner`` is ``e`` or in its cause/context chain."""
    seen = set()
    while e is not None and id(e) not in seen:
        if e is inner:
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def first_line(e: BaseException) -> str:
    """``"<ExceptionType>: <first line of its message>"`` (just the type if there is no message)."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def tag(tensor, key: str) -> None:
    """Mark ``tensor`` as checkpoint tensor ``key`` (a tensor type without attributes stays
    untagged: the current key stands for it)."""
    try:
        setattr(tensor, TAG, key)
    except Exception:  # noqa: BLE001 - untagged
        pass


def key_of(tensor) -> str | None:
    """The key a tensor was tagged with (None: untagged, e.g. built by the loader)."""
    return getattr(tensor, TAG, None)


def shard_of(loaded_weight, args: tuple, kwargs: dict):
    """The shard a ``weight_loader`` call writes (q/k/v, a gate/up index; None: the whole
    parameter): the engines pass it positionally, as ``shard_id``/``loaded_shard_id``, or (vLLM's
    fused MoE weights) on the tensor."""
    if args:
        return args[0]
    if "shard_id" in kwargs:
        return kwargs["shard_id"]
    return kwargs.get("loaded_shard_id", getattr(loaded_weight, "shard_id", None))


def set_weight_loader(p, fn) -> None:
    try:
        p.weight_loader = fn
    except AttributeError:  # a parameter class whose weight_loader is read-only
        object.__setattr__(p, "_weight_loader", fn)


@dataclass  # not weightcheck.record's @record: this file imports the standard library only
class Write:
    """One ``weight_loader`` call that returned."""

    param: str  # the parameter's name in the model
    tensor: object  # the parameter
    loaded: object  # the tensor handed to the weight loader
    key: str | None  # the checkpoint key it is attributed to
    tagged: str | None  # the key the handed tensor carries (None: untagged)
    shard: object
    positional: bool  # the shard came as a positional argument
    before: object  # what :meth:`LoaderLog.before` kept of the parameter


class LoaderLog:
    """Every ``weight_loader`` of a model wrapped (:meth:`wrap`): each call that returns is given
    to :meth:`wrote`; each one that raises is kept in ``raised`` as (key, exception). Subclasses
    say what to keep (:meth:`before`, :meth:`wrote`).

    ``untagged_is_current``: a call on an untagged tensor is attributed to :attr:`current`, the
    key the loading code holds (else to None)."""

    def __init__(self, untagged_is_current: bool = True):
        self.untagged_is_current = untagged_is_current
        self.current: str | None = None  # the key being loaded (None: between keys)
        self.raised: list = []  # [(key, exception)] from a weight_loader that raised
        self.warnings: dict[str, list] = {}  # key -> the engine's warnings while it was current

    def wrap(self, model, default_loader) -> None:
        """Each parameter once, under its first name (vLLM's MLA attention re-references its
        projections as self_attn.mla_attn.*; a tied head is the embedding); a parameter without
        a weight_loader gets the engine's default loader, as the engine's own getattr would."""
        for name, p in model.named_parameters():
            inner = getattr(p, "weight_loader", default_loader)
            set_weight_loader(p, self._wrapper(name, inner))

    def _wrapper(self, pname: str, inner):
        log = self

        def weight_loader(param, loaded_weight, *args, **kwargs):
            tagged = key_of(loaded_weight)
            key = tagged
            if key is None and log.untagged_is_current:
                key = log.current
            shard = shard_of(loaded_weight, args, kwargs)
            before = log.before(param, shard)
            try:
                result = inner(param, loaded_weight, *args, **kwargs)
            except BaseException as e:  # the loader refused this tensor: no write recorded
                log.raised.append((key, e))
                raise
            log.wrote(Write(pname, param, loaded_weight, key, tagged, shard, bool(args), before))
            return result

        weight_loader.__wrapped__ = inner
        return weight_loader

    def follow(self, weights, taken):
        """The (name, tensor) pairs ``weights`` yields, as the loading code takes them up: each
        tagged tensor's key becomes :attr:`current` and is given to ``taken``."""
        for name, tensor in weights:
            key = key_of(tensor)
            if key is not None:
                self.current = key
                taken(key)
            yield name, tensor
        self.current = None

    def before(self, param, shard):
        """What to keep of ``param`` before a write (to see what the write changed)."""
        return None

    def wrote(self, w: Write) -> None:
        raise NotImplementedError

    def stopped_on(self, e: BaseException) -> str | None:
        """The key loading stopped on when it raised ``e``: the one whose weight_loader raised
        it, else the one being loaded (None: between keys)."""
        raised = [k for k, x in self.raised if k is not None and caused_by(e, x)]
        return raised[-1] if raised else self.current


class KeyedWarnings(logging.Handler):
    """The engine's WARNING lines while a key loads, kept in ``log.warnings`` under that key.
    ``source()`` gives the LoaderLog of the load under way (None: none). ``first_line``: keep the
    message's first line only."""

    def __init__(self, source, first_line: bool = False):
        super().__init__(level=logging.WARNING)
        self.source = source
        self.first_line = first_line
        self.last = None

    def emit(self, record):
        if record is self.last:  # one record reaching two of the loggers it is attached to
            return
        self.last = record
        log = self.source()
        if log is None or log.current is None:
            return
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed log call is not ours to report
            msg = str(record.msg)
        if self.first_line:
            msg = msg.strip().splitlines()[0] if msg.strip() else ""
        log.warnings.setdefault(log.current, []).append(msg)


@contextlib.contextmanager
def attached(handler: logging.Handler, loggers):
    """``handler`` on each of ``loggers`` (names), which pass WARNING on while it is attached."""
    saved = []
    for name in loggers:
        lg = logging.getLogger(name)
        saved.append((lg, lg.level))
        if lg.getEffectiveLevel() > logging.WARNING:
            lg.setLevel(logging.WARNING)
        lg.addHandler(handler)
    try:
        yield
    finally:
        for lg, level in saved:
            lg.removeHandler(handler)
            lg.setLevel(level)
