"""tformer's layers point one way, read from the source with `ast`: no import cycle among tformer's modules
(a registry lives above the things it lists, shared helpers below all of them), and the modules under `nn/`
import no config (nor anything of tformer outside `nn/`): they take plain arguments (tensors, ints,
modules), and `models/builders.py` turns configs into them. Inference is not training: `inference/`,
`serve/` and the commands that use a trained model never run a module of `training/` or `tasks/`, and
`interop/` reads and writes models through `tformer.checkpoints`, never through `training/`.

Every `import` and `from ... import` counts, at module level and inside functions (a lazy import that
dodges a cycle is still a cycle), relative ones resolved. `from p import x` is an edge to `p.x` when that
is a module, else to `p`; importing `a.b.c` from outside `a.b` also runs `a.b/__init__.py`, so it is an
edge to `a.b` too.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of tformer (a package by its __init__.py)."""
    out = {}
    for file in sorted((SRC / "tformer").rglob("*.py")):
        parts = file.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return out


def imported(name: str, file: Path, mods: dict[str, Path], part: ast.AST | None = None) -> set[str]:
    """The dotted names `file` (module `name`) imports anywhere in it (or in its `part` only), relative
    imports resolved: `from p import x` gives `p.x` when that is a module, else `p`."""
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(part or ast.parse(file.read_text(), filename=str(file))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out |= {f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names}
    return out


def import_graph() -> dict[str, set[str]]:
    """tformer module -> the tformer modules importing it runs (see the module docstring)."""
    mods = modules()
    graph = {}
    for name, file in mods.items():
        targets = set()
        for target in imported(name, file, mods) & mods.keys():
            parts = target.split(".")
            targets.add(target)
            targets |= {p for i in range(2, len(parts)) if (p := ".".join(parts[:i])) in mods
                        and not f"{name}.".startswith(f"{p}.")}
        graph[name] = targets - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None: a depth-first search that meets a module still on its path."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_import_graph_is_read() -> None:
    graph = import_graph()
    assert "tformer.interop.common" in graph["tformer.interop.gpt2"]
    assert "tformer.interop.gpt2" in graph["tformer.interop.hf"]
    assert "tformer.models" in graph["tformer.interop.hf"]  # `from tformer.models import GPT`
    assert "tformer.interop" in graph["tformer.tasks.classify"]  # inside a function


def test_find_cycle_names_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def inside(name: str, package: str) -> bool:
    return name == package or name.startswith(f"{package}.")


def test_nn_imports_no_config() -> None:
    mods = modules()
    found = {name: sorted(t for t in imported(name, file, mods) if inside(t, "tformer") and not inside(t, "tformer.nn"))
             for name, file in mods.items() if inside(name, "tformer.nn")}
    config = {name: targets for name, targets in found.items() if any(t.startswith("tformer.config") for t in targets)}
    assert not config, f"nn/ modules read a config: {config}"
    # tformer.errors is a leaf (it imports nothing): the one type of what a user can fix, raised at every level
    upward = {name: [t for t in targets if t != "tformer.errors"] for name, targets in found.items()}
    upward = {name: targets for name, targets in upward.items() if targets}
    assert not upward, f"nn/ modules import tformer outside nn/: {upward}"


def test_errors_is_a_leaf() -> None:
    assert not [t for t in imported("tformer.errors", modules()["tformer.errors"], modules()) if inside(t, "tformer")]


def test_viz_imports_no_tasks_or_training() -> None:
    """viz/ draws what it is given; `tasks/` and `cli/` gather it (the report's samples: `tasks/report.py`)."""
    mods = modules()
    upward = {name: sorted(t for t in imported(name, file, mods)
                           if inside(t, "tformer.tasks") or inside(t, "tformer.training") or inside(t, "tformer.cli"))
              for name, file in mods.items() if inside(name, "tformer.viz")}
    upward = {name: targets for name, targets in upward.items() if targets}
    assert not upward, f"viz/ modules import tasks, training or cli: {upward}"


def closure(starts: set[str], graph: dict[str, set[str]]) -> set[str]:
    """Every tformer module that importing `starts` runs, `starts` included."""
    seen, todo = set(), list(starts)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += graph.get(name, ())
    return seen


def function_imports(name: str, function: str) -> set[str]:
    """The tformer modules the body of `function` in module `name` imports (its lazy imports)."""
    mods = modules()
    tree = ast.parse(mods[name].read_text(), filename=str(mods[name]))
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    return imported(name, mods[name], mods, node) & mods.keys()


TRAINING = ("tformer.training", "tformer.tasks")
# the commands that use a trained model, by module and function: they load it through `tformer.inference`
INFERENCE_COMMANDS = [("tformer.cli.translate", "cmd_translate"), ("tformer.cli.lm", "cmd_generate"),
                      ("tformer.cli.lm", "cmd_score"), ("tformer.cli.classify", "cmd_classify"),
                      ("tformer.cli.viz", "cmd_attention"), ("tformer.cli.serve", "cmd_serve")]


def test_closure_and_function_imports_are_read() -> None:
    graph = import_graph()
    assert "tformer.training.loop" in closure({"tformer.tasks.translation"}, graph)
    assert "tformer.tasks.translation" in function_imports("tformer.cli.translate", "cmd_evaluate")


def cli_graph() -> dict[str, set[str]]:
    """`import_graph`, but a module of cli/ imports only what its module level does: each command imports
    its own work in its body, so importing the CLI runs no command's imports."""
    graph, mods = import_graph(), modules()
    for name in (n for n in mods if inside(n, "tformer.cli")):
        tree = ast.parse(mods[name].read_text(), filename=str(mods[name]))
        tree.body = [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
        parents = {p for i in range(2, name.count(".") + 1) if (p := ".".join(name.split(".")[:i])) in mods}
        graph[name] = ((imported(name, mods[name], mods, tree) & mods.keys()) | parents) - {name}
    return graph


def test_inference_serve_and_the_inference_commands_import_no_training() -> None:
    """Using a trained model never runs the training loop's modules: not the inference layer, not the server,
    not the commands that translate, generate, score, classify, draw attention or serve (each with every
    module its imports run, lazy ones in its body included)."""
    graph, mods = cli_graph(), modules()
    starts = {"inference": {n for n in mods if inside(n, "tformer.inference")},
              "serve": {n for n in mods if inside(n, "tformer.serve")}}
    starts |= {f"{m}.{f}": {m} | function_imports(m, f) for m, f in INFERENCE_COMMANDS}
    found = {what: sorted(n for n in closure(names, graph) if any(inside(n, t) for t in TRAINING))
             for what, names in starts.items()}
    found = {what: names for what, names in found.items() if names}
    assert not found, f"these import training or tasks: {found}"
    assert "tformer.tasks.translation" in closure({"tformer.cli.translate"} | function_imports(
        "tformer.cli.translate", "cmd_evaluate"), graph)  # the test sees a command that does


def settings_field_names() -> set[str]:
    """The fields of the decoding settings (`decoding/settings.py`) that name how a search runs: the options a
    flag, a recipe key and a request body all set. Generic names a data or training config may also use (the
    batch size, a seed, `stop`) are left out."""
    from dataclasses import fields

    from tformer.decoding.settings import DecodeConfig, SampleConfig

    generic = {"batch_size", "seed", "stop"}
    return {f.name for cls in (DecodeConfig, SampleConfig) for f in fields(cls)} - generic


def declared_fields(file: Path) -> dict[str, set[str]]:
    """Class name -> the names its body declares with an annotation (a dataclass's or a pydantic model's fields)."""
    out = {}
    for node in ast.walk(ast.parse(file.read_text(), filename=str(file))):
        if isinstance(node, ast.ClassDef):
            out[node.name] = {s.target.id for s in node.body
                              if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    return out


def test_only_decoding_defines_decoding_settings() -> None:
    """A decoding setting is one field of `decoding.DecodeConfig` or `decoding.SampleConfig`: no class outside
    `decoding/` declares one (a request body, a server's batch key, a recipe section or a command's options
    are made from those classes), so adding an option is one field and its check."""
    names = settings_field_names()
    assert {"beam", "lenpen", "temperature", "top_k", "repetition_penalty"} <= names
    found = []
    for name, file in modules().items():
        if inside(name, "tformer.decoding"):
            continue
        for cls, declared in declared_fields(file).items():
            found += [f"{name}.{cls}.{field}" for field in sorted(declared & names)]
    assert found == []


def test_the_settings_rule_sees_a_class_that_lists_a_setting(tmp_path: Path) -> None:
    file = tmp_path / "body.py"
    file.write_text("class Body:\n    text: str\n    beam: int | None = None\n\n"
                    "    def f(self) -> None:\n        x: int = 1\n")
    assert declared_fields(file)["Body"] & settings_field_names() == {"beam"}


def test_interop_imports_no_training() -> None:
    """Converting a model (`tformer convert`, `to_hf`, `from_hf`) reads and writes it through
    `tformer.checkpoints`: no module of interop/ runs a module of `training/` or `tasks/`, through any chain of
    imports."""
    graph, mods = import_graph(), modules()
    below = ("tformer.training", "tformer.tasks")
    found = {name: sorted(n for n in closure({name}, graph) if any(inside(n, b) for b in below))
             for name in mods if inside(name, "tformer.interop")}
    found = {name: names for name, names in found.items() if names}
    assert not found, f"interop/ modules import training: {found}"
    assert "tformer.checkpoints" in closure({"tformer.interop.hf"}, graph)  # the test sees what it does import
