"""The drafter config: as given, and normalized through mappings/config.toml.

``normalize(raw)`` returns a :class:`NormalizedConfig`: for every field of mappings/config.toml its
value, and where it came from (a path such as ``transformer_layer_config.hidden_size``,
``default``, or ``absent``). Speculators' nested layer config, Kimi-K2.5's ``text_config``, aux
ids in ``eagle_config`` or at top level, ``dtype`` vs ``torch_dtype`` and ``rope_parameters`` vs
``rope_scaling`` all end up in the same fields.
"""

from __future__ import annotations

import json
from dataclasses import field

from weightcheck import expr, mappings
from weightcheck.errors import json_type
from weightcheck.record import record
from weightcheck.schema import ConfigFile, FieldSpec

_MISSING = object()
INVALID = "invalid"  # the provenance of a field whose value has the wrong type (see problems)


@record
class NormalizedConfig:
    values: dict = field(default_factory=dict)  # name -> value (None when unknown)
    provenance: dict = field(default_factory=dict)  # name -> path | default | absent | invalid
    # (field, message): values of the wrong type, objects that are not objects, defaults that
    # cannot be computed; each message names the field, the JSON type found and the one expected
    problems: list = field(default_factory=list)
    # the fields (and objects) of ``problems`` whose value is of the wrong JSON type: no engine
    # builds such a config (rule WC212); the other problems are defaults that cannot be computed
    mistyped: set = field(default_factory=set)
    # name -> the mistyped field (or object) that makes it unknown: the field itself, a field
    # inside an object that is not one, a default computed from one of these. Nothing computes
    # with these values; what would have (a tensor's expected shape) is a consequence of that one
    # finding, not a finding of its own.
    unknown_because: dict = field(default_factory=dict)

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

    def blamed(self, names) -> str | None:
        """The mistyped field that makes one of ``names`` (fields or shape symbols) unknown."""
        by_symbol = {s.symbol: s.name for s in field_specs() if s.symbol}
        for n in sorted(names):
            why = self.unknown_because.get(by_symbol.get(n, n))
            if why is not None:
                return why
        return None


def field_specs() -> tuple[FieldSpec, ...]:
    """mappings/config.toml: the fields of the normalized config."""
    return mappings.load_as("config.toml", ConfigFile).field


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


# the JSON types, in the words of JSON (a config is JSON, its reader may not know Python)
# what each config.toml type accepts, and how it is called in a message
EXPECTED = {
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean (true or false)",
    "str": "a string",
    "list": "an array",
    "object": "an object",
}
_TYPES = {
    "int": lambda v: type(v) is int,
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "list": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}
# lists whose items weightcheck reads with a type, and which items the engines read: only
# architectures[0] picks the class (a later item only stands out, WC207); every aux layer id is
# captured (one that is no integer makes the list no value: WC212, and convert refuses it)
ITEM_TYPES = {"architectures": "str", "aux_layer_ids": "int"}
ITEMS_READ = {"architectures": "first", "aux_layer_ids": "all"}


@mappings.memo
def _path_types() -> dict:
    return {path: spec.type for spec in field_specs() for path in spec.paths}


def path_type_expected(path: str) -> str | None:
    """The JSON type mappings/config.toml gives the field at ``path`` (None: not one of its)."""
    return _path_types().get(path)


def path_type_problem(path: str, v) -> str | None:
    """``PATH is a string ("128"), expected an integer`` when ``v``, read at ``path``, is not
    of the JSON type mappings/config.toml gives the field there (None: it is, or the path is
    not one of config.toml's). The engine replays read the same paths with the same types."""
    t = _path_types().get(path)
    if t is None or v is None:
        return None
    if t == "float" and type(v) is int:
        return None
    return None if _TYPES[t](v) else type_problem(path, v, EXPECTED[t])


def container_problem(raw, path: str) -> tuple[str, str] | None:
    """(object, message) when an object ``path`` looks inside is there but is not an object
    (``"eagle_config": 3``): the message is the one normalize() gives it."""
    parts = path.split(".")
    node = raw
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
        if node is not None and not isinstance(node, dict):
            where = ".".join(parts[: i + 1])
            return where, type_problem(
                where, node, "an object"
            ) + ": the fields inside it cannot be read"
    return None


def json_excerpt(v, limit: int = 40) -> str:
    """A value as JSON, cut to ``limit`` characters: what a message quotes."""
    text = json.dumps(v, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def type_problem(path: str, v, expected: str) -> str:
    """``PATH is a string ("256"), expected an integer``: the field, the type found, the type
    expected, in JSON's words."""
    found = json_type(v)
    shown = "" if v is None else f" ({json_excerpt(v)})"
    return f"{path} is {found}{shown}, expected {expected}"


def _container_problems(raw: dict, specs) -> list[tuple[str, str]]:
    """An object the config.toml paths look inside (``transformer_layer_config``, ``eagle_config``,
    ``text_config``, ``rope_parameters``, ...) that is there but is not an object: every field
    inside it is unreadable, which is worth one message, not silence."""
    out, seen = [], set()
    for spec in specs:
        for path in spec.paths:
            bad = container_problem(raw, path)
            if bad is not None and bad[0] not in seen:
                seen.add(bad[0])
                out.append(bad)
    return out


def _inside(spec: FieldSpec, container: str) -> bool:
    return any(p.startswith(container + ".") for p in spec.paths)


def _read(raw: dict, spec: FieldSpec, out: NormalizedConfig) -> bool:
    """Set ``spec``'s value and provenance from the first path that has a value of its type;
    True when it is absent and its default remains to be computed."""
    invalid = None
    for path in spec.paths:
        v = lookup(raw, path)
        if v is None and spec.null == "value":
            out.values[spec.name] = None
            out.provenance[spec.name] = path
            return False
        if v is _MISSING or v is None:  # null is how transformers writes "not set"
            continue
        if spec.type == "float" and type(v) is int:
            v = float(v)
        if not _TYPES[spec.type](v):
            out.problems.append((spec.name, type_problem(path, v, EXPECTED[spec.type])))
            out.mistyped.add(spec.name)
            invalid = invalid or path
            continue
        item = ITEM_TYPES.get(spec.name)
        wrong = [i for i, x in enumerate(v) if not _TYPES[item](x)] if item else []
        if wrong:  # one finding per field: the first wrong item, and how many more
            i = wrong[0]
            more = f" (and {len(wrong) - 1} more item(s))" if len(wrong) > 1 else ""
            said = type_problem(f"{path}[{i}]", v[i], EXPECTED[item]) + more
            out.problems.append((spec.name, said))
        if (0 in wrong) if ITEMS_READ.get(spec.name) == "first" else wrong:
            # an item the engines read is of the wrong type: the list is no value
            out.mistyped.add(spec.name)
            invalid = invalid or path
            continue
        out.values[spec.name] = v
        out.provenance[spec.name] = path
        return False
    out.values[spec.name] = None
    # a value of the wrong type is not a value, and no default stands in for it: the
    # engine would read what is written, not our default
    out.provenance[spec.name] = INVALID if invalid else "absent"
    if invalid:
        out.unknown_because[spec.name] = spec.name
        return False
    # a field inside an object that is not one is unreadable, not absent
    bad = next((c for c in sorted(out.mistyped) if _inside(spec, c)), None)
    if bad is not None:
        out.unknown_because[spec.name] = bad
        return False
    return spec.default is not None


def _defaults(out: NormalizedConfig, pending: list) -> None:
    """Compute the defaults of the absent fields: they may refer to other fields, including
    other defaults, so resolve until stable."""
    for _ in range(len(pending) + 1):
        progressed = False
        for spec in list(pending):
            # a default that reads a field of the wrong type is not computed: unknown because of it
            why = next(
                (
                    out.unknown_because[n]
                    for n in sorted(expr.names(spec.default))
                    if n in out.unknown_because
                ),
                None,
            )
            if why is not None:
                out.unknown_because[spec.name] = why
                pending.remove(spec)
                progressed = True
                continue
            try:
                value = expr.evaluate(spec.default, out.values)
            except expr.Undefined:
                continue
            except (ArithmeticError, TypeError) as e:
                # e.g. head_dim = hidden_size // num_attention_heads with 0 heads: no value
                why = "a division by zero" if isinstance(e, ZeroDivisionError) else "no number"
                out.problems.append(
                    (
                        spec.name,
                        f"{spec.name} is absent and its default {spec.default} gives {why} "
                        "with this config",
                    )
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


def normalize(raw: dict | None) -> NormalizedConfig:
    raw = raw or {}
    out = NormalizedConfig()
    specs = field_specs()
    containers = _container_problems(raw, specs)
    out.problems.extend(containers)
    out.mistyped.update(where for where, _ in containers)
    pending = [spec for spec in specs if _read(raw, spec, out)]
    _defaults(out, pending)
    # derived, informational: how the dtype is spelled (`dtype` in transformers 5, else `torch_dtype`)
    src = out.provenance.get("dtype", "absent")
    out.values["dtype_key"] = src.rsplit(".", 1)[-1] if src != "absent" else None
    out.provenance["dtype_key"] = src
    return out
