"""A tiny, safe expression language for the data files in mappings/.

Shapes (``"T * n_aux"``), defaults (``"hidden_size // num_attention_heads"``) and conditions
(``"fc_norm and not norm_output"``) are written as Python expressions over named values, and
evaluated here on a whitelisted AST: names, integer/float/bool/None/str constants, lists,
arithmetic, comparisons, ``and``/``or``/``not``, ``x if c else y``, list indexing ``ids[0]`` and the functions ``len``,
``min``, ``max``. No attribute access, no subscripts beyond lists, no calls to anything else.

:func:`evaluate` computes one; :func:`holds` decides a condition (``when``: absent holds, one that
needs an unknown value does not); :func:`names` checks one when a data file is loaded and says
which values it reads.
"""

from __future__ import annotations

import ast
import functools
import operator

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
_FUNCS = {"len": len, "min": min, "max": max}


class ExprError(ValueError):
    """An expression in a mapping file is malformed or names an unknown value."""


class Undefined(ExprError):
    """The expression needs a value the config does not provide."""


@functools.lru_cache(maxsize=None)
def _parse(src: str) -> ast.AST:
    try:
        return ast.parse(src, mode="eval").body
    except SyntaxError as e:
        raise ExprError(f"bad expression {src!r}: {e.msg}") from None


def evaluate(src: str, names: dict):
    """Evaluate ``src`` with ``names``. A name whose value is None is *unknown*: it may be tested for
    truth (``x if aux_layer_ids else 3``: unknown is false) or with ``is None``, but arithmetic,
    ordering or equality on it raises Undefined, as does a name not given at all."""
    try:
        return _eval(_parse(src), names, src)
    except TypeError as e:
        raise Undefined(f"{e} (in {src!r})") from None


def holds(src: str | None, names: dict) -> bool:
    """A condition (a ``when`` in mappings/): absent (None) always holds; one that needs a value
    ``names`` does not give, or gives as unknown where a known one is needed, does not."""
    if src is None:
        return True
    try:
        return bool(evaluate(src, names))
    except Undefined:
        return False


def names(src: str) -> frozenset[str]:
    """The names ``src`` reads (not ``true``/``false`` nor the functions), after checking that
    every part of it is something :func:`evaluate` computes: ExprError otherwise. For checking
    the data files when they are loaded."""
    out: set[str] = set()
    _names(_parse(src), src, out)
    return frozenset(out)


def _names(node, src, out):
    kids: list = []
    if isinstance(node, ast.Constant):
        pass
    elif isinstance(node, ast.Name):
        if node.id not in ("true", "false"):
            out.add(node.id)
    elif isinstance(node, (ast.List, ast.Tuple)):
        kids = node.elts
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        kids = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
        kids = [node.operand]
    elif isinstance(node, ast.BoolOp):
        kids = node.values
    elif isinstance(node, ast.Compare) and all(type(op) in _CMPOPS for op in node.ops):
        kids = [node.left, *node.comparators]
    elif isinstance(node, ast.Subscript):
        kids = [node.value, node.slice]
    elif isinstance(node, ast.IfExp):
        kids = [node.test, node.body, node.orelse]
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and not node.keywords
    ):
        kids = node.args
    else:
        raise ExprError(f"unsupported syntax in {src!r}: {ast.dump(node)[:60]}")
    for k in kids:
        _names(k, src, out)


def _eval(node, names, src):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in ("true", "false"):
            return node.id == "true"
        if node.id not in names:
            raise Undefined(f"{node.id} is not known (in {src!r})")
        return names[node.id]
    if isinstance(node, ast.List) or isinstance(node, ast.Tuple):
        return [_eval(e, names, src) for e in node.elts]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _eval(node.left, names, src), _eval(node.right, names, src)
        for v in (a, b):  # arithmetic is on numbers only: "256" * 2 is not 512
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                what = "an unknown value" if v is None else f"{type(v).__name__} {v!r}"
                raise Undefined(f"arithmetic on {what} (in {src!r})")
        return _BINOPS[type(node.op)](a, b)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, names, src)
        if isinstance(node.op, ast.Not):
            return not v
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return +v
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            result = True
            for v in node.values:
                result = _eval(v, names, src)
                if not result:
                    return result
            return result
        result = False
        for v in node.values:
            result = _eval(v, names, src)
            if result:
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names, src)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, names, src)
            if (left is None or right is None) and not isinstance(op, (ast.Is, ast.IsNot)):
                raise Undefined(f"comparison with an unknown value (in {src!r})")
            if type(op) not in _CMPOPS or not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Subscript):  # ids[0]: a list indexed by an integer
        seq, idx = _eval(node.value, names, src), _eval(node.slice, names, src)
        if not isinstance(seq, list) or type(idx) is not int or not -len(seq) <= idx < len(seq):
            raise Undefined(f"cannot index {seq!r} with {idx!r} (in {src!r})")
        return seq[idx]
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, names, src) else node.orelse, names, src)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and not node.keywords
    ):
        return _FUNCS[node.func.id](*[_eval(a, names, src) for a in node.args])
    raise ExprError(f"unsupported syntax in {src!r}: {ast.dump(node)[:60]}")
