"""Plain data (YAML) in and out of typed dataclasses: the package's one strict loader.

    read_yaml(path, what=)        the mapping in a YAML file; every problem a one-line ValueError
    parse_yaml(text, what=)       one YAML value (a `key=value` override's value); both read with
                                  `StrictLoader`: safe tags only, a key given twice in a mapping refused
                                  (with both lines), aliases bounded (MAX_ALIAS_NODES: no alias bomb)
    apply_overrides(data, items)  `a.b.c=value` overrides into nested dicts
    dump_yaml(data)               the text written back (recipe.yaml, a checkpoint's config.yaml)
    from_dict(cls, data)          a dataclass from nested dicts: an unknown key, a wrong type, a value
                                  outside a `Literal[...]`, a float that is not finite or an integer
                                  beyond 64 bits is a ValueError naming the dotted key (an unknown one
                                  with the key meant: a typo's, or a nested setting's given by its name
                                  alone); a key the class has renamed (its RENAMED) is refused with a
                                  pointer to the new one
    nested_keys(cls), nested_matches(cls, name)   every dotted setting; those a bare name likely means
    renamed_keys(cls, data)       a file's keys from before a rename under their new names (a saved
                                  checkpoint's config.yaml loads; a recipe or an override is refused)
    to_dict(config)               the dataclass as nested dicts
    check_literals(config)        the `Literal[...]` fields of a dataclass built directly in Python
    check_finite(config)          its float fields (finite), likewise
    shown(value)                  a value in a message: its repr, cut to about 80 characters

A field typed `Literal["a", "b"]` lists its allowed values once, in the type; both the loader and the
dataclasses' `__post_init__` check against it, with one message: `name='c' is not allowed; choose one of
a, b`. Generic: this module knows no config class (`tformer.config` holds those and imports this).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import reprlib
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from tformer.errors import UserError

C = TypeVar("C")


# --- YAML text ------------------------------------------------------------------------------------------


def read_yaml(path: str | Path, *, what: str) -> dict | None:
    """The mapping in YAML file `path`, or None when the file is empty. `what` names the file in the
    errors (e.g. "config file recipe.yaml"): it does not exist, is not UTF-8, is not valid YAML (with the
    line and column), repeats a key, expands aliases too far, or holds something other than a mapping."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{what} is not UTF-8 (byte {e.start})") from None
    data = parse_yaml(text, what=what)
    if data is not None and not isinstance(data, dict):
        raise UserError(f"{what} must hold a mapping of keys, not {type(data).__name__}")
    return data


def parse_yaml(text: str, *, what: str) -> Any:
    """One YAML document, read by `StrictLoader` (safe tags only, no repeated key, aliases bounded); every
    problem is a one-line ValueError naming `what`: `<what> is not valid YAML (line L, column C: problem)`,
    or `<what>: <problem>` for a repeated key or an alias bomb."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (StrictLoader is a SafeLoader)
    except Refused as e:
        raise UserError(f"{what}: {e}") from None
    except yaml.YAMLError as e:
        raise UserError(f"{what} is not valid YAML ({yaml_problem(e)})") from None
    except RecursionError:
        raise UserError(f"{what} is not valid YAML (nested too deeply)") from None
    except ValueError as e:  # a constructor's own refusal: int() of more than 4300 digits, a date 2024-13-45
        problem = "an integer of more than 4300 digits" if "4300 digits" in str(e) else " ".join(str(e).split())
        raise UserError(f"{what} is not valid YAML ({shown(problem)[1:-1]})") from None
    except (LookupError, TypeError, ArithmeticError, AttributeError) as e:  # a tag's constructor: !!bool maybe
        problem = f"a value its tag cannot make: {type(e).__name__} {' '.join(str(e).split())}"
        raise UserError(f"{what} is not valid YAML ({shown(problem)[1:-1]})") from None


def yaml_problem(e: yaml.YAMLError) -> str:
    """Where and what a YAML error is, on one line: 'line 2, column 1: expected ...'."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is None or problem is None:
        return " ".join(str(e).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


# A document's aliases may add at most this many nodes to it (counted as expanded, an alias of an alias
# included). A recipe or a checkpoint's config.yaml is a few hundred nodes; the package never writes an
# alias; and aliases are the one YAML feature by which a small file grows without bound (the "billion
# laughs": nine aliases of nine aliases of ... expand to 9**9 nodes), in memory or in an error message.
# So a recipe may still share a small block (`&optim` ... `*optim`), and a bomb is refused before it is built.
MAX_ALIAS_NODES = 1000


class Refused(yaml.YAMLError):
    """Valid YAML that the strict loader refuses: a repeated key, aliases that expand too far."""


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader (plain data only: no Python objects, no code) that also refuses a key given twice
    in one mapping (YAML 1.2 requires keys to be unique; PyYAML keeps the last, silently) and aliases that
    would expand the document by more than MAX_ALIAS_NODES nodes, or into itself."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases: list[tuple[str, int, yaml.Node]] = []  # (anchor, the line using it, the node it names)

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        alias = self.peek_event() if self.check_event(yaml.AliasEvent) else None
        node = super().compose_node(parent, index)
        if alias is not None:
            self.aliases.append((alias.anchor, alias.start_mark.line + 1, node))
        return node

    def compose_document(self) -> yaml.Node:
        node = super().compose_document()
        check_aliases(node, self.aliases)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # a merge key (`<<: *base`) may be overridden by the keys given beside it
            key, line = self.construct_object(key_node), key_node.start_mark.line + 1
            if key in first:
                raise Refused(f"key {shown(key)} is given twice in one mapping (lines {first[key]} and {line}); "
                              "give each key once")
            first[key] = line
        return super().construct_mapping(node, deep=deep)


def check_aliases(root: yaml.Node | None, aliases: list[tuple[str, int, yaml.Node]]) -> None:
    """Refuse a composed document whose aliases expand it by more than MAX_ALIAS_NODES nodes, or one with an
    alias inside the node it names (which never ends); the message names the alias and its line."""
    if root is None or not aliases:
        return
    sizes: dict[int, int] = {}  # id(node) -> its size, expanded
    counting: set[int] = set()  # the nodes being counted: meeting one again is a cycle

    def size(node: yaml.Node) -> int:
        if id(node) in counting:
            anchor, line = next((a, n) for a, n, target in aliases if target is node)
            raise Refused(f"alias *{anchor} (line {line}) is used inside the node it names, so it never ends")
        if id(node) not in sizes:
            counting.add(id(node))
            parts = node.value if isinstance(node, yaml.CollectionNode) else []
            children = [c for pair in parts for c in pair] if isinstance(node, yaml.MappingNode) else parts
            sizes[id(node)] = 1 + sum(size(c) for c in children)
            counting.discard(id(node))
        return sizes[id(node)]

    added = size(root) - len(sizes)
    if added > MAX_ALIAS_NODES:
        anchor, line, _ = max(aliases, key=lambda a: sizes[id(a[2])])
        raise Refused(f"its aliases expand it by {added} nodes (the largest: *{anchor}, line {line}), more than "
                      f"the {MAX_ALIAS_NODES} allowed; write the repeated parts out")


class _PlainDumper(yaml.SafeDumper):
    """Writes an object met twice in full, never as an anchor and alias (which StrictLoader bounds)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(data: dict) -> str:
    """YAML text of plain data, keys in their given order, without aliases."""
    return yaml.dump(data, Dumper=_PlainDumper, sort_keys=False)


def apply_overrides(data: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """Set each `a.b.c=value` of `overrides` in the nested dicts `data` (values parsed as YAML, sections
    created as needed); returns `data`."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"override {shown(item)} is not key=value (e.g. train.max_steps=100)")
        set_dotted(data, key, parse_yaml(value, what=f"override {shown(item)}: the value"))
    return data


def flat_keys(data: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one dict of dotted keys (`{"train": {"seed": 0}}` -> `{"train.seed": 0}`)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flat_keys(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def set_dotted(data: dict, key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise UserError(f"override {shown(key)}: {shown(part)} is not a section")
    node[last] = value


# --- messages -------------------------------------------------------------------------------------------

_SHORT = reprlib.Repr()  # bounds what is built: a few items of a few levels, strings and numbers cut
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 6
_SHORT.maxlevel = 3
SHOWN_CHARS = 80


def shown(value: object) -> str:
    """`repr(value)` for a message, at most SHOWN_CHARS characters however large the value: a long string, a
    big list or nested mapping are cut with `...` (and never built in full, so a huge value costs nothing)."""
    try:
        text = _SHORT.repr(value)
    except ValueError:  # an int of more than 4300 digits, which repr refuses
        return f"<an integer of {value.bit_length()} bits>" if isinstance(value, int) else "<a value>"
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS - 20]}...{text[-17:]}"


# --- dataclasses ----------------------------------------------------------------------------------------


def to_dict(config: Any) -> dict:
    return dataclasses.asdict(config)


def from_dict(cls: type[C], data: dict, *, where: str = "") -> C:
    """Build dataclass `cls` from nested dicts; an unknown key or a wrong type is a ValueError naming it.

    A string given for a sub-config with a `SHORTHAND` is short for that one field (`attention: linear`
    means `attention: {kind: linear}`); a partial sub-config overrides the default of its field (which a
    family may set apart from the sub-config's own defaults)."""
    if not isinstance(data, dict):
        raise UserError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = _hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        name = f"{where}{key}"
        if key not in known:
            _refuse_renamed(cls, key, where)
            close = difflib.get_close_matches(str(key), known, n=1)  # a typo: `train.max_step`
            deeper = [] if close else nested_matches(cls, str(key))  # a leaf's name alone: `time_budget_min`
            meant = " or ".join(shown(where + k) for k in (close or deeper))
            hint = f"did you mean {meant}? " if meant else ""
            raise UserError(f"unknown config key {shown(name)}; {hint}known keys: {', '.join(sorted(known))}")
        kwargs[key] = _coerce(hints[key], with_default(known[key], hints[key], value), name)
    return cls(**kwargs)


def nested_keys(cls: type, prefix: str = "") -> list[str]:
    """The dotted keys of every setting of dataclass `cls` and of the dataclasses nested in it, in field
    order (`train.optim.lr`); a sub-config is walked, not listed itself."""
    keys = []
    for name, hint in _hints(cls).items():
        if dataclasses.is_dataclass(hint):
            keys += nested_keys(hint, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def nested_matches(cls: type, name: str, *, n: int = 2) -> list[str]:
    """The dotted keys below the top level of dataclass `cls` that `name` most likely means: those whose last
    part is `name`, else whose last part is close to it (`time_budget` -> `train.time_budget_min`); at most
    `n`, best first (of one name, the shallower first). What a setting given by its name alone, or spelt as
    an option, is told to write."""
    dotted = [k for k in nested_keys(cls) if "." in k]
    leaves: dict[str, list[str]] = {}
    for key in dotted:
        leaves.setdefault(key.rsplit(".", 1)[1], []).append(key)
    close = [name] if name in leaves else difflib.get_close_matches(name, leaves, n=n)
    return [key for leaf in close for key in sorted(leaves[leaf], key=lambda k: k.count("."))][:n]  # shallow first


def _refuse_renamed(cls: type, key: object, where: str) -> None:
    """A ValueError pointing to the new name if `key` is one that dataclass `cls` has renamed: its class
    attribute RENAMED maps an old key to (the new key, what it is), and a Literal's choices are listed."""
    moved = getattr(cls, "RENAMED", {})
    if key not in moved:
        return
    new, what = moved[key]
    hint = _hints(cls)[new]
    choices = f", one of {', '.join(map(str, typing.get_args(hint)))}" if typing.get_origin(hint) is Literal else ""
    raise UserError(f"config key {shown(where + str(key))} is now {shown(where + new)} {what}{choices}")


def renamed_keys(cls: type, data: Any) -> Any:
    """`data` for dataclass `cls` with the keys its RENAMED lists under their new names, for a file written
    before the rename (a saved checkpoint's config.yaml) to load as it was meant. A key given under both names
    is left as it is, for `from_dict` to refuse; anything but a mapping is returned unchanged."""
    moved = getattr(cls, "RENAMED", {})
    if not isinstance(data, dict) or not moved:
        return data
    return {(moved[k][0] if k in moved and moved[k][0] not in data else k): v for k, v in data.items()}


def with_default(field: dataclasses.Field, hint: Any, value: Any) -> Any:
    """`value` for dataclass field `field` of type `hint`, with a shorthand string expanded and a partial
    sub-config (a dict) merged over the field's default."""
    if isinstance(value, str) and hasattr(hint, "SHORTHAND"):
        value = {hint.SHORTHAND: value}
    factory = field.default_factory
    if dataclasses.is_dataclass(hint) and isinstance(value, dict) and factory is not dataclasses.MISSING:
        value = {**given(factory()), **value}
    return value


def given(config: Any) -> dict:
    """A sub-config's own values, leaving out those its __post_init__ derives (listed in its DERIVED)."""
    derived = getattr(config, "DERIVED", ())
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in derived}
    return {k: given(v) if dataclasses.is_dataclass(v) else v for k, v in values.items()}


def check_choice(name: str, value: object, allowed: tuple) -> None:
    """`value` must be one of `allowed`: the one message for a value outside a choice."""
    if value not in allowed:
        raise UserError(f"{name}={shown(value)} is not allowed; choose one of {', '.join(map(str, allowed))}")


def check_literals(config: Any, *, where: str = "") -> None:
    """Check every field of dataclass `config` typed `Literal[...]` against its allowed values, in field
    order; `where` prefixes the names in the message (`norm.`)."""
    for name, hint in _hints(type(config)).items():
        if typing.get_origin(hint) is Literal:
            check_choice(f"{where}{name}", getattr(config, name), typing.get_args(hint))


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The resolved type hints of a dataclass's fields (cached: the configs are built often)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(hint: Any, value: Any, name: str) -> Any:
    if value is None and hint in (str, int, float, bool):
        expected = {str: "str", int: "an integer", float: "float", bool: "true or false"}[hint]
        raise UserError(f"config key {shown(name)} is empty (null); expected {expected}")
    if dataclasses.is_dataclass(hint):
        return value if isinstance(value, hint) else from_dict(hint, value, where=f"{name}.")
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(hint, value, name)
    if origin is Literal:
        check_choice(name, value, typing.get_args(hint))
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise UserError(f"config key {shown(name)}={shown(value)} has the wrong type; expected a list")
        (item,) = typing.get_args(hint)[:1] or (Any,)
        return origin(_coerce(item, v, f"{name}[{i}]") for i, v in enumerate(value))
    if hint is Any:
        return value
    if hint is float:
        return _coerce_float(value, name)
    if hint is bool and not isinstance(value, bool):
        raise UserError(f"config key {shown(name)}={shown(value)} has the wrong type; expected true or false")
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise UserError(f"config key {shown(name)}={shown(value)} has the wrong type; expected an integer")
    if hint is int and not -INT_LIMIT <= value < INT_LIMIT:
        raise OutOfRange(f"config key {shown(name)}={shown(value)} is out of range; an integer here must lie "
                         "in [-2**63, 2**63)")
    if hint is dict and not isinstance(value, dict):
        raise UserError(f"config key {shown(name)}={shown(value)} has the wrong type; expected a mapping")
    if hint is str and not isinstance(value, str):
        raise UserError(f"config key {shown(name)}={shown(value)} has the wrong type; expected str")
    return value


INT_LIMIT = 2**63  # every integer of a config fits a signed 64-bit integer (torch, numpy and tokenizers need it)


class OutOfRange(UserError):
    """A value of the right type outside what any field of that type allows (a float that is not finite, an
    integer beyond 64 bits): reported as such, even where a union would try the next type."""


def _coerce_float(value: Any, name: str) -> float:
    """A float field's value: a float, an int, or a string such as "1e-4" (YAML 1.1, which PyYAML follows,
    reads an exponent without a dot as a string); it must be finite (`.inf`, `.nan`, `1e999` are refused)."""
    number = value
    if isinstance(value, str | int) and not isinstance(value, bool):
        try:
            number = float(value)
        except ValueError:  # not a number: the wrong type, below
            pass
        except OverflowError:  # an integer beyond the float range
            number = math.inf
    if not isinstance(number, float):
        raise UserError(f"config key {shown(name)}={shown(value)} has the wrong type; expected float")
    if not math.isfinite(number):
        raise OutOfRange(f"config key {shown(name)}={shown(value)} is not a finite number")
    return number


def check_finite(config: Any, *, where: str = "") -> None:
    """Every float of dataclass `config` (a field typed float, float | None or tuple[float, ...]) must be
    finite: the check of a config built in Python, which `from_dict` makes of every one it reads."""
    for name, hint in _hints(type(config)).items():
        if float not in (hint, *typing.get_args(hint)):
            continue
        value = getattr(config, name)
        values = value if isinstance(value, tuple | list) else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise OutOfRange(f"{where}{name}={shown(value)} is not a finite number")


def _coerce_union(hint: Any, value: Any, name: str) -> Any:
    options = typing.get_args(hint)
    if value is None and type(None) in options:
        return None
    for option in options:
        if option is type(None):
            continue
        try:
            return _coerce(option, value, name)
        except OutOfRange:
            raise
        except ValueError:
            continue
    raise UserError(f"config key {shown(name)}={shown(value)} has the wrong type; expected {_type_name(hint)}")


def _type_name(hint: Any) -> str:
    return " or ".join(getattr(a, "__name__", str(a)) for a in typing.get_args(hint))


__all__ = [
    "MAX_ALIAS_NODES", "OutOfRange", "StrictLoader", "apply_overrides", "check_choice", "check_finite",
    "check_literals", "dump_yaml", "flat_keys", "from_dict", "given", "nested_keys", "nested_matches", "parse_yaml",
    "read_yaml", "renamed_keys", "set_dotted", "shown", "to_dict", "yaml_problem",
]
