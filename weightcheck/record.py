"""``@record``: a dataclass whose ``__init__``, ``__repr__`` and ``__eq__`` are shared functions
of this module instead of code generated per class.

``dataclasses.dataclass`` writes each class's ``__init__`` (and ``__repr__``, ``__eq__``) as source
text and compiles it with ``exec`` when the class is defined: about 0.2-0.8 ms a class on this
project's machines. Every command defines some sixty classes before it does any work (the
mappings' schemas, the reports, the model), which made the header-level commands' start-up
10-20% slower than before the reports were typed (BENCHMARKS.md "Start-up"). A record is still a
real dataclass — ``dataclasses.fields``, ``replace``, ``asdict``, ``is_dataclass`` and the
field ``metadata`` the JSON and the schemas read all work — with the same constructor
(positional and keyword arguments, defaults, ``default_factory``, ``kw_only``, ``__post_init__``)
and the same ``repr`` and ``==``; it is only defined faster. ``typing.dataclass_transform``
tells type checkers so.

    @record                      # like @dataclass
    @record(kw_only=True)        # like @dataclass(kw_only=True)
    @record(eq=False, repr=False)

    @record(frozen=True)         # assigning a field raises FrozenInstanceError; hashable

Not supported (not used here; use ``dataclasses.dataclass``): ``order``, ``unsafe_hash``,
``slots``, ``InitVar``.
"""

from __future__ import annotations

import dataclasses
from typing import dataclass_transform

_MISSING = dataclasses.MISSING


def _init(self, *args, **kwargs) -> None:
    """The constructor of every record: ``fields`` in order, positional ones first."""
    cls = type(self)
    if args:
        positional = cls.__record_positional__
        if len(args) > len(positional):
            raise TypeError(
                f"{cls.__name__}() takes {len(positional)} positional arguments"
                f" but {len(args)} were given"
            )
        for name, value in zip(positional, args):
            if name in kwargs:
                raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
            kwargs[name] = value
    values = self.__dict__
    for name, default, factory in cls.__record_init__:
        value = kwargs.pop(name, _MISSING)
        if value is _MISSING:
            if default is not _MISSING:
                value = default
            elif factory is not _MISSING:
                value = factory()
            else:
                raise TypeError(f"{cls.__name__}() missing required argument: {name!r}")
        values[name] = value
    if kwargs:
        raise TypeError(
            f"{cls.__name__}() got an unexpected keyword argument {next(iter(kwargs))!r}"
        )
    for name, default, factory in cls.__record_later__:  # field(init=False) with a default
        values[name] = default if default is not _MISSING else factory()
    if cls.__record_post_init__:
        self.__post_init__()


def _repr(self) -> str:
    parts = (f"{f.name}={getattr(self, f.name)!r}" for f in type(self).__record_repr__)
    return f"{type(self).__qualname__}({', '.join(parts)})"


def _eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    names = type(self).__record_compare__
    return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)


def _hash(self) -> int:
    return hash(tuple(getattr(self, n) for n in type(self).__record_hash__))


def _frozen_setattr(self, name, value):
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self, name):
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _prepare(cls, init: bool, repr: bool, eq: bool, frozen: bool):
    """What the shared methods read, computed once per class from its dataclass fields."""
    fields = dataclasses.fields(cls)
    cls.__record_init__ = tuple((f.name, f.default, f.default_factory) for f in fields if f.init)
    cls.__record_positional__ = tuple(f.name for f in fields if f.init and not f.kw_only)
    cls.__record_later__ = tuple(
        (f.name, f.default, f.default_factory)
        for f in fields
        if not f.init and (f.default is not _MISSING or f.default_factory is not _MISSING)
    )
    cls.__record_post_init__ = hasattr(cls, "__post_init__")
    cls.__record_repr__ = tuple(f for f in fields if f.repr)
    cls.__record_compare__ = tuple(f.name for f in fields if f.compare)
    if init:
        cls.__init__ = _init
    if repr:
        cls.__repr__ = _repr
    if eq:
        cls.__eq__ = _eq
        cls.__hash__ = None  # as dataclass(eq=True) does: a mutable value has no hash
    if frozen:
        cls.__setattr__, cls.__delattr__ = _frozen_setattr, _frozen_delattr
        if eq:  # as dataclass(frozen=True) does: hash what == compares
            cls.__record_hash__ = tuple(
                f.name for f in fields if (f.compare if f.hash is None else f.hash)
            )
            cls.__hash__ = _hash
    return cls


@dataclass_transform()
def record(
    cls=None,
    /,
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    frozen: bool = False,
    kw_only: bool = False,
):
    """A dataclass with shared methods (module docstring)."""

    def wrap(cls):
        if not cls.__dict__.get("__doc__"):
            # dataclass documents an undocumented class with inspect.signature (slow); say its
            # fields instead
            cls.__doc__ = f"{cls.__name__}({', '.join(cls.__dict__.get('__annotations__', ()))})"
        cls = dataclasses.dataclass(
            cls, init=False, repr=False, eq=False, match_args=False, kw_only=kw_only
        )
        return _prepare(cls, init, repr, eq, frozen)

    return wrap if cls is None else wrap(cls)
