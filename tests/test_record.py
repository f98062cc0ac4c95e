"""``@record`` (weightcheck/record.py) behaves as ``@dataclass`` does: the same constructor, repr,
==, hash and frozenness, for each way the package defines its classes — checked side by side with
the standard library on twin class definitions."""

from __future__ import annotations

import dataclasses
from dataclasses import field

import pytest

from weightcheck.record import record


def twins(**options):
    """The same class body decorated by ``dataclass`` and by ``record``."""

    def make(deco):
        class Base:
            a: int
            b: str = "x"
            c: list = field(default_factory=list)
            d: int = field(default=4, repr=False, compare=False)
            e: int = field(default=0, init=False)

        Base.__qualname__ = "Base"
        return deco(**options)(Base)

    return make(dataclasses.dataclass), make(record)


CALLS = [
    ((1,), {}),
    ((1, "y"), {}),
    ((1,), {"c": [2], "d": 9}),
    ((), {"a": 3, "b": "z"}),
]
BAD_CALLS = [
    ((), {}),  # a missing
    ((1, "y", [], 5, 6), {}),  # too many positional
    ((1,), {"a": 2}),  # a twice
    ((1,), {"zz": 2}),  # unknown
    ((1,), {"e": 2}),  # init=False
]


@pytest.mark.parametrize("options", [{}, {"frozen": True}, {"eq": False}, {"repr": False}])
@pytest.mark.parametrize("args,kwargs", CALLS)
def test_same_values_repr_and_equality(options, args, kwargs):
    std, ours = twins(**options)
    s, o = std(*args, **kwargs), ours(*args, **kwargs)
    assert dataclasses.asdict(s) == dataclasses.asdict(o)
    assert [f.name for f in dataclasses.fields(s)] == [f.name for f in dataclasses.fields(o)]
    if options.get("repr", True):
        assert repr(s) == repr(o)
    assert (s == std(*args, **kwargs)) == (o == ours(*args, **kwargs))
    assert (s == std(7)) == (o == ours(7))
    if options.get("eq", True):
        assert o == ours(*args, **{**kwargs, "d": 99})  # d is not compared
    assert (std.__hash__ is None) == (ours.__hash__ is None)
    if std.__hash__ is not None and options.get("frozen"):
        assert hash(std(*args, **{**kwargs, "c": ()})) == hash(ours(*args, **{**kwargs, "c": ()}))


@pytest.mark.parametrize("args,kwargs", BAD_CALLS)
def test_same_refusals(args, kwargs):
    std, ours = twins()
    with pytest.raises(TypeError):
        std(*args, **kwargs)
    with pytest.raises(TypeError):
        ours(*args, **kwargs)


def test_frozen_refuses_assignment_and_deletion():
    _, ours = twins(frozen=True)
    o = ours(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.a = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del o.a
    assert o.a == 1
    assert dataclasses.replace(o, a=5).a == 5


def test_kw_only_inheritance_and_post_init():
    @record
    class Parent:
        x: int

    @record(kw_only=True)
    class Child(Parent):
        y: int
        z: int = 3

        def __post_init__(self):
            self.total = self.x + self.y + self.z

    c = Child(1, y=2)
    assert (c.x, c.y, c.z, c.total) == (1, 2, 3, 6)
    with pytest.raises(TypeError):
        Child(1, 2)  # y is keyword-only
    assert repr(c) == "test_kw_only_inheritance_and_post_init.<locals>.Child(x=1, y=2, z=3)"


def test_documents_an_undocumented_class_by_its_fields():
    @record
    class Plain:
        a: int
        b: int = 0

    assert Plain.__doc__ == "Plain(a, b)"
