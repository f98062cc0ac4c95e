"""weightcheck/expr.py, the expression language of mappings/: what it computes, what it refuses."""

from __future__ import annotations

import pytest

from weightcheck.expr import ExprError, Undefined, evaluate, holds, names


@pytest.mark.parametrize(
    "src, names, want",
    [
        ("T * n_aux", {"T": 7168, "n_aux": 3}, 21504),
        (
            "hidden_size // num_attention_heads",
            {"hidden_size": 4096, "num_attention_heads": 32},
            128,
        ),
        ("2 * H + 1", {"H": 64}, 129),
        ("a / b", {"a": 3, "b": 2}, 1.5),
        ("a % b", {"a": 7, "b": 4}, 3),
        ("2 ** k", {"k": 3}, 8),
        ("-x", {"x": 5}, -5),
        ("+x", {"x": 5}, 5),
        ("fc_norm and not norm_output", {"fc_norm": True, "norm_output": False}, True),
        ("fc_norm and not norm_output", {"fc_norm": True, "norm_output": True}, False),
        ("a or b", {"a": 0, "b": 4}, 4),
        ("a and b", {"a": 0, "b": 4}, 0),
        ("x if ids else 3", {"x": 1, "ids": None}, 3),  # unknown is false
        ("x if ids else 3", {"x": 1, "ids": [2]}, 1),
        ("ids[0]", {"ids": [2, 30, 58]}, 2),
        ("ids[-1] + 1", {"ids": [2, 30, 58]}, 59),
        ("len(ids)", {"ids": [2, 30, 58]}, 3),
        ("min(a, b)", {"a": 2, "b": 1}, 1),
        ("max([a, b, 9])", {"a": 2, "b": 1}, 9),
        ("k + 1 if ids[0] == 1 else k", {"k": 5, "ids": [1, 29, 57]}, 6),
        ("k + 1 if ids[0] == 1 else k", {"k": 5, "ids": [2, 30, 58]}, 5),
        ("[2, L // 2, L - 3]", {"L": 61}, [2, 30, 58]),
        ("1 < k <= L", {"k": 3, "L": 3}, True),
        ("1 < k <= L", {"k": 4, "L": 3}, False),
        ("x is None", {"x": None}, True),
        ("x is not None", {"x": None}, False),
        ("m in ['llama', 'qwen3']", {"m": "qwen3"}, True),
        ("m not in ['llama']", {"m": "qwen3"}, True),
        ("true and not false", {}, True),
        ("'text'", {}, "text"),
    ],
)
def test_evaluates(src, names, want):
    assert evaluate(src, names) == want


@pytest.mark.parametrize(
    "src, names",
    [
        ("missing + 1", {}),  # a name not given
        ("x * 2", {"x": None}),  # arithmetic on an unknown value
        ("x < 3", {"x": None}),  # ordering with an unknown value
        ("x == 3", {"x": None}),  # equality with an unknown value
        ("ids[3]", {"ids": [1, 2, 3]}),  # out of range
        ("ids['a']", {"ids": [1, 2, 3]}),  # not an integer index
        ("n[0]", {"n": 5}),  # not a list
        ("2 * H", {"H": "256"}),  # a string where a number is needed
    ],
)
def test_undefined(src, names):
    with pytest.raises(Undefined):
        evaluate(src, names)


@pytest.mark.parametrize(
    "src",
    [
        "x.real",  # attribute access
        "open('f')",  # a function outside the whitelist
        "__import__('os')",
        "(lambda: 1)()",
        "[i for i in ids]",  # comprehensions
        "{'a': 1}",  # dicts
        "a[1:2]",  # slices
        "x +",  # syntax
        "",
    ],
)
def test_refused(src):
    with pytest.raises(ExprError):
        evaluate(src, {"x": 1, "ids": [1], "a": [1, 2, 3]})
    with pytest.raises(ExprError):  # and refused before any evaluation, when a file is loaded
        names(src)


def test_undefined_is_an_expr_error_and_says_where():
    with pytest.raises(ExprError, match=r"in 'missing \+ 1'"):
        evaluate("missing + 1", {})


def test_short_circuit_never_evaluates_the_other_side():
    """``and``/``or``/``if`` evaluate only what they need: an unknown value on the side not taken
    is no error (the mapping files rely on this for optional fields)."""
    assert evaluate("False and missing", {}) is False
    assert evaluate("True or missing", {}) is True
    assert evaluate("1 if True else missing", {}) == 1


@pytest.mark.parametrize(
    "src, want",
    [
        ("T * n_aux", {"T", "n_aux"}),
        ("not use_aux_hidden_state", {"use_aux_hidden_state"}),
        ("fc_norm or use_aux_norm", {"fc_norm", "use_aux_norm"}),
        ("k if ids[0] == 1 else k-1", {"k", "ids"}),
        ("k-1 if max(ids) == L else k", {"k", "ids", "L"}),  # functions are not names
        ("true and not false", set()),
        ("'full attention'", set()),
        ("[1, L//2-1, L-4]", {"L"}),
        ("x is not None and -y in [z]", {"x", "y", "z"}),
    ],
)
def test_names(src, want):
    assert names(src) == want


@pytest.mark.parametrize(
    "src, values, want",
    [
        (None, {}, True),  # no condition: always
        ("norm_before_fc", {"norm_before_fc": True}, True),
        ("norm_before_fc", {"norm_before_fc": False}, False),
        ("not use_aux_hidden_state", {"use_aux_hidden_state": None}, True),  # unknown is false
        ("draft_vocab_size != vocab_size", {"draft_vocab_size": 8}, False),  # a name not given
        ("draft_vocab_size != vocab_size", {"draft_vocab_size": None, "vocab_size": 8}, False),
        ("draft_vocab_size != vocab_size", {"draft_vocab_size": 4, "vocab_size": 8}, True),
        ("ids", {"ids": [2]}, True),  # truthiness of a value
    ],
)
def test_holds(src, values, want):
    assert holds(src, values) is want


def test_holds_refuses_what_is_not_the_language():
    with pytest.raises(ExprError):
        holds("a.b", {"a": {"b": True}})
