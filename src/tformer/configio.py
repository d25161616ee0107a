"""Plain data (YAML) in and out of typed dataclasses: the package's one strict loader.

    read_yaml(path, what=)        the mapping in a YAML file; every problem a one-line ValueError
    parse_yaml(text, what=)       one YAML value (a `key=value` override's value)
    apply_overrides(data, items)  `a.b.c=value` overrides into nested dicts
    dump_yaml(data)               the text written back (recipe.yaml, a checkpoint's config.yaml)
    from_dict(cls, data)          a dataclass from nested dicts: an unknown key, a wrong type or a value
                                  outside a `Literal[...]` is a ValueError naming the dotted key
    to_dict(config)               the dataclass as nested dicts
    check_literals(config)        the `Literal[...]` fields of a dataclass built directly in Python

A field typed `Literal["a", "b"]` lists its allowed values once, in the type; both the loader and the
dataclasses' `__post_init__` check against it, with one message: `name='c' is not allowed; choose one of
a, b`. Generic: this module knows no config class (`tformer.config` holds those and imports this).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

C = TypeVar("C")


# --- YAML text ------------------------------------------------------------------------------------------


def read_yaml(path: str | Path, *, what: str) -> dict | None:
    """The mapping in YAML file `path`, or None when the file is empty. `what` names the file in the
    errors (e.g. "config file recipe.yaml"): it does not exist, is not UTF-8, is not valid YAML (with the
    line and column), or holds something other than a mapping."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{what} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} is not UTF-8 (byte {e.start})") from None
    data = parse_yaml(text, what=what)
    if data is not None and not isinstance(data, dict):
        raise ValueError(f"{what} must hold a mapping of keys, not {type(data).__name__}")
    return data


def parse_yaml(text: str, *, what: str) -> Any:
    """`yaml.safe_load(text)`; a syntax error is a ValueError `<what> is not valid YAML (line L, column C:
    problem)`."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"{what} is not valid YAML ({yaml_problem(e)})") from None


def yaml_problem(e: yaml.YAMLError) -> str:
    """Where and what a YAML error is, on one line: 'line 2, column 1: expected ...'."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is None or problem is None:
        return " ".join(str(e).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def dump_yaml(data: dict) -> str:
    """YAML text of plain data, keys in their given order."""
    return yaml.safe_dump(data, sort_keys=False)


def apply_overrides(data: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """Set each `a.b.c=value` of `overrides` in the nested dicts `data` (values parsed as YAML, sections
    created as needed); returns `data`."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r} is not key=value (e.g. train.max_steps=100)")
        set_dotted(data, key, parse_yaml(value, what=f"override {item!r}: the value"))
    return data


def set_dotted(data: dict, key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"override {key!r}: {part!r} is not a section")
    node[last] = value


# --- dataclasses ----------------------------------------------------------------------------------------


def to_dict(config: Any) -> dict:
    return dataclasses.asdict(config)


def from_dict(cls: type[C], data: dict, *, where: str = "") -> C:
    """Build dataclass `cls` from nested dicts; an unknown key or a wrong type is a ValueError naming it.

    A string given for a sub-config with a `SHORTHAND` is short for that one field (`attention: linear`
    means `attention: {kind: linear}`); a partial sub-config overrides the default of its field (which a
    family may set apart from the sub-config's own defaults)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = _hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        name = f"{where}{key}"
        if key not in known:
            raise ValueError(f"unknown config key {name!r}; known keys: {', '.join(sorted(known))}")
        kwargs[key] = _coerce(hints[key], with_default(known[key], hints[key], value), name)
    return cls(**kwargs)


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
        raise ValueError(f"{name}={value!r} is not allowed; choose one of {', '.join(map(str, allowed))}")


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
            raise ValueError(f"config key {name!r}={value!r} has the wrong type; expected a list")
        (item,) = typing.get_args(hint)[:1] or (Any,)
        return origin(_coerce(item, v, f"{name}[{i}]") for i, v in enumerate(value))
    if hint is Any:
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):
        try:  # YAML 1.1 (PyYAML) reads 1e-4, without a dot, as a string
            return float(value)
        except ValueError:
            pass
    if hint is bool and not isinstance(value, bool):
        raise ValueError(f"config key {name!r}={value!r} has the wrong type; expected true or false")
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"config key {name!r}={value!r} has the wrong type; expected an integer")
    if hint is dict and not isinstance(value, dict):
        raise ValueError(f"config key {name!r}={value!r} has the wrong type; expected a mapping")
    if hint in (float, str) and not isinstance(value, hint):
        raise ValueError(f"config key {name!r}={value!r} has the wrong type; expected {hint.__name__}")
    return value


def _coerce_union(hint: Any, value: Any, name: str) -> Any:
    options = typing.get_args(hint)
    if value is None and type(None) in options:
        return None
    for option in options:
        if option is type(None):
            continue
        try:
            return _coerce(option, value, name)
        except ValueError:
            continue
    raise ValueError(f"config key {name!r}={value!r} has the wrong type; expected {_type_name(hint)}")


def _type_name(hint: Any) -> str:
    return " or ".join(getattr(a, "__name__", str(a)) for a in typing.get_args(hint))


__all__ = [
    "apply_overrides", "check_choice", "check_literals", "dump_yaml", "from_dict", "given", "parse_yaml",
    "read_yaml", "set_dotted", "to_dict", "yaml_problem",
]
