"""`tformer recipes list / copy` and recipes by name (`tformer train demo`): the recipes that ship inside the
package (tformer.recipes). The bad inputs are docs/errors.md cases 193 to 199 (catalogue.run_case: exit 2,
one line, nothing on disk changed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogue import Case, Ctx, in_catalogue, run_case

from tformer import recipes
from tformer.cli import main
from tformer.tasks import load_recipe

SHIPPED = ["bert-pretrain", "classify-bbc", "classify-sentiment", "demo", "demo-20", "demo-gpu", "gpt-bible",
           "gpt-bible-draft", "long", "road-attention", "road-rnn", "road-transformer", "synthetic-attention",
           "synthetic-rnn", "synthetic-transformer"]
KNOWN = ", ".join(SHIPPED)


def test_the_package_ships_the_recipes() -> None:
    assert recipes.names() == SHIPPED
    assert recipes.path("demo.yaml") == recipes.path("demo") == recipes.HERE / "demo.yaml"


def test_list_prints_each_name_and_its_first_comment_line(capsys: pytest.CaptureFixture) -> None:
    assert main(["recipes", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == SHIPPED
    demo = lines[SHIPPED.index("demo")]
    first = recipes.path("demo").read_text().splitlines()[0].removeprefix("# ")
    assert demo.endswith(first) and first.startswith("The demo: an English -> German translator")


@pytest.mark.parametrize("name", ["demo", "gpt-bible.yaml"])
def test_copy_writes_the_recipe_byte_for_byte(name: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    dest = tmp_path / "my.yaml"
    assert main(["recipes", "copy", name, str(dest)]) == 0
    assert dest.read_bytes() == recipes.path(name).read_bytes()
    assert capsys.readouterr().out == f"wrote {dest}\n"


def test_copy_into_a_folder_names_the_file_after_the_recipe(tmp_path: Path) -> None:
    assert main(["recipes", "copy", "long", str(tmp_path)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["long.yaml"]
    assert (tmp_path / "long.yaml").read_bytes() == recipes.path("long").read_bytes()


def test_copy_overwrite_replaces_an_existing_file(tmp_path: Path) -> None:
    dest = tmp_path / "my.yaml"
    dest.write_text("mine\n")
    assert main(["recipes", "copy", "demo", str(dest), "--overwrite"]) == 0
    assert dest.read_bytes() == recipes.path("demo").read_bytes()


@pytest.mark.parametrize("name", ["demo", "demo.yaml", "gpt-bible", "classify-bbc", "bert-pretrain"])
def test_a_recipe_name_reads_the_shipped_file(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no file of that name here
    assert load_recipe(name, ["train.max_steps=7"]) == load_recipe(recipes.path(name), ["train.max_steps=7"])
    assert load_recipe(name).train.max_steps != 7


def test_every_shipped_recipe_is_a_valid_config() -> None:
    for name in SHIPPED:
        recipe = load_recipe(name)
        assert recipe.task in {"translation", "lm", "bert", "classify"}, name


@pytest.mark.parametrize("command", ["train", "demo"])
def test_train_and_demo_resolve_a_name(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture) -> None:
    """`tformer train demo` reads the shipped recipe: a bad override is refused by the recipe's own keys (so
    the name was found), before any data loads or anything is written."""
    monkeypatch.chdir(tmp_path)
    assert main([command, "demo", "train.epochz=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tformer: error: unknown config key 'train.epochz'") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_a_file_in_the_way_wins_over_the_shipped_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    """A path is always a path: ./demo.yaml is read, not the shipped demo."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo.yaml").write_text("task: [lm\n")
    assert main(["train", "demo.yaml"]) == 2
    assert "config file demo.yaml is not valid YAML" in capsys.readouterr().err
    (tmp_path / "demo").write_text("task: lm\nout_dir: mine\n")
    assert load_recipe("demo").out_dir == "mine"


def copy_over(c: Ctx, dest: str) -> list[str]:
    c.file(dest, "mine\n")
    return ["recipes", "copy", "demo", str(c.tmp / dest)]


def dangling(c: Ctx) -> list[str]:
    (c.tmp / "link.yaml").symlink_to(c.tmp / "missing.yaml")
    return ["recipes", "copy", "demo", str(c.tmp / "link.yaml")]


def by_name(c: Ctx, command: str, name: str) -> list[str]:
    c.monkeypatch.chdir(c.tmp)
    return [command, name]


CASES = [
    Case("train-unknown-recipe-name", lambda c: by_name(c, "train", "nope"),
         (f"'nope' is neither a recipe file nor a shipped recipe; shipped recipes: {KNOWN} (tformer recipes list)",)),
    Case("demo-unknown-recipe-name", lambda c: by_name(c, "demo", "demo.yml"),
         (f"'demo.yml' is neither a recipe file nor a shipped recipe; shipped recipes: {KNOWN}",)),
    Case("recipes-copy-unknown-name", lambda c: ["recipes", "copy", "nope", str(c.tmp / "my.yaml")],
         (f"no shipped recipe named 'nope'; known: {KNOWN}",)),
    Case("recipes-copy-over-a-file", lambda c: copy_over(c, "my.yaml"),
         ("{tmp}/my.yaml already exists; add --overwrite to replace it",)),
    Case("recipes-copy-into-a-folder-over-a-file", lambda c: copy_over(c, "mine/demo.yaml")[:3] + [str(c.tmp / "mine")],
         ("{tmp}/mine/demo.yaml already exists; add --overwrite to replace it",)),
    Case("recipes-copy-into-a-missing-folder", lambda c: ["recipes", "copy", "demo", str(c.tmp / "no/such/x.yaml")],
         ("cannot write {tmp}/no/such/x.yaml: folder {tmp}/no/such does not exist",)),
    Case("recipes-copy-over-a-dangling-link", lambda c: dangling(c),
         ("{tmp}/link.yaml already exists; add --overwrite to replace it",)),
    Case("recipes-copy-to-an-empty-dest", lambda c: ["recipes", "copy", "demo", ""],
         ("DEST '' is empty; give a file to write, a folder, or - for standard output",)),
    Case("recipes-copy-into-a-missing-folder-with-a-slash", lambda c: ["recipes", "copy", "demo", f"{c.tmp}/newdir/"],
         ("cannot write into {tmp}/newdir/: no such folder; create it, or give a file name",)),
    Case("recipes-without-an-action", lambda c: ["recipes"],
         ("the following arguments are required: {list,copy}",)),
    Case("recipes-unknown-action", lambda c: ["recipes", "cp", "demo", "x.yaml"],
         ("invalid choice: 'cp'", "list", "copy")),
    Case("recipes-copy-without-dest", lambda c: ["recipes", "copy", "demo"],
         ("the following arguments are required: dest",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, Ctx(None, tmp_path, monkeypatch), capsys)  # no case needs the catalogue's world


def test_every_case_is_in_the_catalogue() -> None:
    assert len({c.id for c in CASES}) == len(CASES)
    assert not in_catalogue(CASES)


# --- every special target, through the one output writer (files.write_output) ---------------------------


def test_copy_to_dash_writes_the_recipe_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["recipes", "copy", "demo", "-"]) == 0
    assert capsys.readouterr().out == recipes.path("demo").read_text()
    assert list(tmp_path.iterdir()) == []  # no file named -


def test_copy_over_links_keeps_the_link_and_writes_its_target(tmp_path: Path) -> None:
    (tmp_path / "old.yaml").write_text("old\n")
    (tmp_path / "link.yaml").symlink_to(tmp_path / "old.yaml")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "new.yaml")
    for name in ("link.yaml", "dangling.yaml"):
        assert main(["recipes", "copy", "demo", str(tmp_path / name), "--overwrite"]) == 0
        assert (tmp_path / name).is_symlink()
    demo = recipes.path("demo").read_bytes()
    assert (tmp_path / "old.yaml").read_bytes() == demo and (tmp_path / "new.yaml").read_bytes() == demo


def test_copy_over_a_private_file_keeps_its_permissions(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("old\n")
    mine.chmod(0o600)
    assert main(["recipes", "copy", "demo", str(mine), "--overwrite"]) == 0
    assert mine.read_bytes() == recipes.path("demo").read_bytes() and mine.stat().st_mode & 0o777 == 0o600


def test_copy_onto_a_fifo_or_a_device_writes_in_place(tmp_path: Path) -> None:
    import os
    import threading

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert main(["recipes", "copy", "demo", str(fifo), "--overwrite"]) == 0
    reader.join(10)
    assert got == [recipes.path("demo").read_bytes()] and fifo.is_fifo()  # the reader got it; still a FIFO
    assert main(["recipes", "copy", "demo", "/dev/null", "--overwrite"]) == 0
    assert Path("/dev/null").is_char_device()
