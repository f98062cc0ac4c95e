"""The drafter config: as given, and normalized through mappings/config.toml.

``normalize(raw)`` returns a :class:`NormalizedConfig`: for every field of mappings/config.toml its
value, and where it came from (a path such as ``transformer_layer_config.hidden_size``,
``default``, or ``absent``). Speculators' nested layer config, Kimi-K2.5's ``text_config``, aux
ids in ``eagle_config`` or at top level, ``dtype`` vs ``torch_dtype`` and ``rope_parameters`` vs
``rope_scaling`` all end up in the same fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from weightcheck import expr, mappings

_MISSING = object()


@dataclass(frozen=True)
class FieldSpec:
    name: str
    paths: tuple[str, ...]
    type: str
    category: str
    symbol: str | None = None
    default: str | None = None


@dataclass
class NormalizedConfig:
    values: dict = field(default_factory=dict)  # name -> value (None when unknown)
    provenance: dict = field(default_factory=dict)  # name -> path | "default" | "absent"
    problems: list = field(default_factory=list)  # (field, message) for values of the wrong type

    def get(self, name, default=None):
        v = self.values.get(name)
        return default if v is None else v

    def __getitem__(self, name):
        return self.values[name]

    def symbols(self) -> dict:
        """Values by field name *and* by shape symbol (H, I, nh, ...), for expressions."""
        out = dict(self.values)
        for spec in field_specs():
            if spec.symbol:
                out[spec.symbol] = self.values.get(spec.name)
        return out


def field_specs() -> tuple[FieldSpec, ...]:
    data = mappings.load("config.toml")
    return tuple(
        FieldSpec(
            name=f["name"],
            paths=tuple(f.get("paths", ())),
            type=f["type"],
            category=f["category"],
            symbol=f.get("symbol"),
            default=f.get("default"),
        )
        for f in data["field"]
    )


def category_of(name: str) -> str:
    for spec in field_specs():
        if spec.name == name:
            return spec.category
    return "informational"


def lookup(raw: dict, path: str):
    node = raw
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


_TYPES = {
    "int": lambda v: type(v) is int,
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "list": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def normalize(raw: dict | None) -> NormalizedConfig:
    raw = raw or {}
    out = NormalizedConfig()
    specs = field_specs()
    pending = []
    for spec in specs:
        for path in spec.paths:
            v = lookup(raw, path)
            if v is _MISSING or v is None:
                continue
            if spec.type == "float" and type(v) is int:
                v = float(v)
            if not _TYPES[spec.type](v):
                out.problems.append(
                    (spec.name, f"{path} should be {spec.type}, is {type(v).__name__} {v!r}")
                )
                continue
            out.values[spec.name] = v
            out.provenance[spec.name] = path
            break
        else:
            out.values[spec.name] = None
            out.provenance[spec.name] = "absent"
            if spec.default is not None:
                pending.append(spec)
    # defaults may refer to other fields, including other defaults: resolve until stable
    for _ in range(len(pending) + 1):
        progressed = False
        for spec in list(pending):
            try:
                value = expr.evaluate(spec.default, out.values)
            except expr.Undefined:
                continue
            except (ArithmeticError, TypeError) as e:
                # e.g. head_dim = hidden_size // num_attention_heads with 0 heads: no value
                out.problems.append(
                    (spec.name, f"default {spec.default!r} cannot be computed: {e}")
                )
                pending.remove(spec)
                progressed = True
                continue
            if value is None:  # the default names a field that is itself unknown: still absent
                continue
            out.values[spec.name] = value
            out.provenance[spec.name] = "default"
            pending.remove(spec)
            progressed = True
        if not progressed:
            break
    # derived, informational: how the dtype is spelled (`dtype` in transformers 5, else `torch_dtype`)
    src = out.provenance.get("dtype", "absent")
    out.values["dtype_key"] = src.rsplit(".", 1)[-1] if src != "absent" else None
    out.provenance["dtype_key"] = src
    return out
