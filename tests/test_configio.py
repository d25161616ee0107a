"""The one strict loader (`tformer.configio`): unknown keys and wrong types are errors naming the dotted key,
a `Literal[...]` field allows only its values (in the loader and when built in Python, with one message),
nested dataclasses go to dicts and back unchanged, and YAML files fail with one line naming the problem."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from tformer.config import ATTENTION_KINDS, AttentionConfig, GPTConfig, Seq2SeqConfig
from tformer.configio import (
    apply_overrides,
    check_literals,
    dump_yaml,
    from_dict,
    nested_keys,
    nested_matches,
    parse_yaml,
    read_yaml,
    renamed_keys,
    to_dict,
)

Colour = Literal["red", "green"]


@dataclass(kw_only=True)
class Inner:
    SHORTHAND = "colour"

    colour: Colour = "red"
    size: int = 1

    def __post_init__(self) -> None:
        check_literals(self, where="inner.")


@dataclass(kw_only=True)
class Outer:
    name: str = "x"
    rate: float = 0.5
    tags: list[str] = field(default_factory=list)
    limit: int | None = None
    inner: Inner = field(default_factory=lambda: Inner(size=2))


def test_unknown_keys_are_named_with_their_path() -> None:
    with pytest.raises(ValueError, match=r"unknown config key 'inner.weight'; known keys: colour, size"):
        from_dict(Outer, {"inner": {"weight": 3}})
    with pytest.raises(ValueError, match=r"unknown config key 'nam'; did you mean 'name'\? known keys: inner, limit, "
                                         r"name, rate, tags"):
        from_dict(Outer, {"nam": "y"})


def test_a_nested_setting_given_by_its_name_alone_is_shown_its_dotted_key() -> None:
    """A name no top-level key is close to, but the last part of a nested one (or close to it), is shown the
    dotted key: `size=3` means `inner.size=3`; a top-level typo still gets the top-level key."""
    with pytest.raises(ValueError, match=r"unknown config key 'size'; did you mean 'inner.size'\? known keys: inner"):
        from_dict(Outer, {"size": 3})
    with pytest.raises(ValueError, match=r"unknown config key 'colur'; did you mean 'inner.colour'\?"):
        from_dict(Outer, {"colur": "red"})
    with pytest.raises(ValueError, match=r"unknown config key 'nam'; did you mean 'name'\?"):
        from_dict(Outer, {"nam": "y"})
    with pytest.raises(ValueError, match=r"unknown config key 'zzz'; known keys"):
        from_dict(Outer, {"zzz": 1})
    assert nested_keys(Outer) == ["name", "rate", "tags", "limit", "inner.colour", "inner.size"]
    assert nested_matches(Outer, "size") == ["inner.size"] and nested_matches(Outer, "name") == []


def test_the_recipe_setting_of_a_bare_name_is_the_shallowest_first() -> None:
    from tformer.tasks import meant_key
    from tformer.tasks.translation import TranslationRecipe

    assert nested_matches(TranslationRecipe, "seed") == ["train.seed", "data.synthetic.seed"]
    assert nested_matches(TranslationRecipe, "time_budget") == ["train.time_budget_min"]
    assert (meant_key("--time-budget"), meant_key("--out-dir"), meant_key("--lr")) == \
        ("train.time_budget_min", "out_dir", "train.optim.lr")
    assert meant_key("--bogus") is None


@dataclass(kw_only=True)
class Renamed:
    RENAMED = {"hue": ("colour", "for this test's class: its only choice")}

    colour: Colour = "red"
    inner: Inner = field(default_factory=Inner)


def test_a_renamed_key_is_refused_with_a_pointer_and_read_under_its_new_name_from_a_saved_file() -> None:
    with pytest.raises(ValueError, match=r"^config key 'hue' is now 'colour' for this test's class: its only choice, "
                                         r"one of red, green$"):
        from_dict(Renamed, {"hue": "green"})
    with pytest.raises(ValueError, match=r"unknown config key 'inner.hue'"):  # RENAMED is the class's own
        from_dict(Renamed, {"inner": {"hue": "green"}})
    assert from_dict(Renamed, renamed_keys(Renamed, {"hue": "green"})).colour == "green"
    assert renamed_keys(Renamed, {"hue": "green", "colour": "red"}) == {"hue": "green", "colour": "red"}  # refused
    assert renamed_keys(Outer, {"name": "y"}) == {"name": "y"} and renamed_keys(Renamed, [1]) == [1]


def test_wrong_types_are_named() -> None:
    with pytest.raises(ValueError, match=r"config key 'inner.size'='2' has the wrong type; expected an integer"):
        from_dict(Outer, {"inner": {"size": "2"}})
    with pytest.raises(ValueError, match=r"config key 'limit'='no' has the wrong type; expected int or NoneType"):
        from_dict(Outer, {"limit": "no"})
    with pytest.raises(ValueError, match=r"config key 'tags\[1\]'=3 has the wrong type; expected str"):
        from_dict(Outer, {"tags": ["a", 3]})
    assert from_dict(Outer, {"rate": 1, "limit": None}).rate == 1.0  # an int where a float goes
    assert from_dict(Outer, {"rate": "1e-4"}).rate == 1e-4  # PyYAML reads 1e-4 as a string


def test_a_literal_allows_only_its_values_with_one_message() -> None:
    message = "inner.colour='blue' is not allowed; choose one of red, green"
    with pytest.raises(ValueError, match=message):
        from_dict(Outer, {"inner": {"colour": "blue"}})
    with pytest.raises(ValueError, match=message):
        Inner(colour="blue")  # built in Python: __post_init__ checks the same Literal
    with pytest.raises(ValueError, match="inner.colour='blue' is not allowed"):
        from_dict(Outer, {"inner": "blue"})  # the shorthand for {colour: blue}
    allowed = ", ".join(ATTENTION_KINDS)
    for build in (lambda: AttentionConfig(kind="flash"), lambda: from_dict(GPTConfig, {"attention": "flash"})):
        with pytest.raises(ValueError, match=f"attention.kind='flash' is not allowed; choose one of {allowed}"):
            build()


def test_a_partial_sub_config_overrides_the_fields_default() -> None:
    outer = from_dict(Outer, {"inner": {"colour": "green"}})
    assert outer.inner == Inner(colour="green", size=2)  # size from Outer's default Inner, not Inner's own
    assert from_dict(Outer, {"inner": "green"}).inner == Inner(colour="green", size=2)


@pytest.mark.parametrize("config", [
    Outer(name="y", tags=["a", "b"], limit=3, inner=Inner(colour="green", size=5)),
    GPTConfig(d_model=32, n_heads=4, n_kv_heads=2, attention=AttentionConfig(kind="windowed", window=8),
              norm={"kind": "rmsnorm", "placement": "pre"}, positions="rope"),
    Seq2SeqConfig(vocab_size=100, d_model=16, n_heads=2, src_vocab_size=50, n_decoder_layers=1),
], ids=["outer", "gpt", "seq2seq"])
def test_nested_dataclasses_round_trip(config: object) -> None:
    data = to_dict(config)
    assert from_dict(type(config), data) == config
    assert from_dict(type(config), parse_yaml(dump_yaml(data), what="text")) == config  # through YAML too


def test_yaml_files_fail_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    with pytest.raises(ValueError, match="recipe does not exist"):
        read_yaml(path, what="recipe")
    path.write_text("a: [1\nb: 2\n")
    with pytest.raises(ValueError, match=r"^recipe is not valid YAML \(line \d+, column \d+: .+\)$"):
        read_yaml(path, what="recipe")
    path.write_bytes(b"a: caf\xe9\n")
    with pytest.raises(ValueError, match=r"recipe is not UTF-8 \(byte 6\)"):
        read_yaml(path, what="recipe")
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="recipe must hold a mapping of keys, not list"):
        read_yaml(path, what="recipe")
    path.write_text("")
    assert read_yaml(path, what="recipe") is None
    path.write_text("a: {b: 1}\n")
    assert read_yaml(path, what="recipe") == {"a": {"b": 1}}


def test_overrides_set_dotted_keys() -> None:
    data = apply_overrides({"a": {"b": 1}}, ["a.c=[1, 2]", "d.e=x"])
    assert data == {"a": {"b": 1, "c": [1, 2]}, "d": {"e": "x"}}
    with pytest.raises(ValueError, match="override 'a' is not key=value"):
        apply_overrides({}, ["a"])
    with pytest.raises(ValueError, match=r"override 'a.b.c': 'b' is not a section"):
        apply_overrides({"a": {"b": 1}}, ["a.b.c=1"])
    with pytest.raises(ValueError, match=r"override 'a=\{b': the value is not valid YAML \(line 1, column 3"):
        apply_overrides({}, ["a={b"])


def test_shown_cuts_any_value_short() -> None:
    """Values in messages: repr as usual when short, cut with ... when long, never built in full."""
    from tformer.configio import shown

    assert shown([1, 2]) == "[1, 2]" and shown("abc") == "'abc'" and shown(0.5) == "0.5"
    assert len(shown("x" * 1_000_000)) < 80 and "..." in shown("x" * 1_000_000)
    assert len(shown([[list(range(100))] * 100] * 100)) < 120
    assert shown(10**5000).startswith("<an integer of")  # repr itself refuses more than 4300 digits


def test_repeated_keys_are_compared_as_yaml_reads_them() -> None:
    """`1:` and `"1":` are different keys (an int and a string); `a:` twice is one key given twice."""
    assert parse_yaml('{1: a, "1": b}', what="x") == {1: "a", "1": "b"}
    with pytest.raises(ValueError, match=r"x: key 'a' is given twice in one mapping \(lines 1 and 3\)"):
        parse_yaml("a: 1\nb: 2\na: 3\n", what="x")


def test_flat_keys() -> None:
    from tformer.configio import flat_keys

    assert flat_keys({"train": {"seed": 0, "optim": {"lr": 1.0}}, "task": "lm"}) == {
        "train.seed": 0, "train.optim.lr": 1.0, "task": "lm"}


TAGS = ["!!bool", "!!int", "!!float", "!!str", "!!null", "!!timestamp", "!!binary", "!!set", "!!omap", "!!pairs",
        "!!seq", "!!map", "!!merge", "!!value", "!!python/name:os.system", "!<tag:yaml.org,2002:bool>", "!local"]
VALUES = ["maybe", "1e999", "0x", "2024-13-45", "%%%", "[1, 2]", "{a: 1}", "[[1]]", "''", "-", "9" * 5000]


@pytest.mark.parametrize("tag", TAGS)
def test_every_tag_on_any_value_parses_or_is_one_line(tag: str) -> None:
    """A YAML tag whose constructor cannot make the value (PyYAML's bool constructor raises KeyError for
    !!bool maybe) is one ValueError line naming the document, never another exception (issue 31, class 4)."""
    for value in VALUES:
        for text in (f"task: {tag} {value}\n", f"{tag} {value}\n"):
            try:
                parse_yaml(text, what="the recipe")
            except ValueError as e:
                assert str(e).startswith("the recipe") and "\n" not in str(e), (text, str(e))
