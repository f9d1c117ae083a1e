"""Structure checks of the package read from its source: the trainer and the sweep name no model, dataset or metric,
and no import cycle among graphnorm's modules, counting imports inside functions."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from graphnorm.data import available_datasets
from graphnorm.data.scoring import metric_names
from graphnorm.models import available_models, model_spec
from graphnorm.models.registry import INPUTS

PACKAGE = Path(__file__).resolve().parents[1] / "graphnorm"
GENERIC_FILES = sorted(
    str(path.relative_to(PACKAGE)) for folder in ("train", "sweep") for path in (PACKAGE / folder).glob("*.py")
)


def code_words(path: Path) -> set[str]:
    """Lower-case words (split at anything but letters and digits, so ``val_acc`` gives ``val`` and ``acc``) of the
    names and string literals of ``path``; comments and docstrings left out."""
    source = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.add(value.lineno)
    words: set[str] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.STRING and token.start[0] in docstrings:
            continue
        if token.type in (tokenize.NAME, tokenize.STRING) or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            words |= {word.lower() for word in re.split(r"[^A-Za-z0-9]+", token.string) if word}
    return words


def forbidden_names() -> set[str]:
    models = set(available_models())
    model_classes = {model_spec(name).factory.__name__.lower() for name in models}
    return models | model_classes | set(available_datasets()) | set(metric_names())


# The run's batches come in the model's input kind (models.registry.INPUTS); "graphormer" is one, a batch format.
ALLOWED_NAMES = {"train/loaders.py": set(INPUTS)}


def test_trainer_and_sweep_name_no_model_dataset_or_metric() -> None:
    names = forbidden_names()
    assert {"gcn", "graphormer", "deepgcn", "cora", "zinc", "acc", "rocauc", "mae"} <= names
    for file in GENERIC_FILES:
        found = sorted(code_words(PACKAGE / file) & names - ALLOWED_NAMES.get(file, set()))
        assert not found, f"graphnorm/{file} names {found}"


def string_constants(path: Path) -> dict[str, int]:
    """Each string literal of ``path`` (docstrings and the defaults of dataclass fields left out) and its line."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skipped.add(id(body[0].value))
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            skipped.add(id(node.value))  # a field default, e.g. RunConfig's model: str = "gcn"
    return {
        node.value: node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
    }


def test_config_compares_no_model_dataset_or_metric_name() -> None:
    """The run configuration (graphnorm/config/) asks the registries (a model's declared rules, a dataset's level)
    instead of comparing names; RunConfig's defaults (dataset "cora", model "gcn") are the only names it holds."""
    for path in sorted((PACKAGE / "config").glob("*.py")):
        found = {text: line for text, line in string_constants(path).items() if text in forbidden_names()}
        assert not found, f"graphnorm/config/{path.name} compares names: {found}"
    source = (PACKAGE / "config" / "run_config.py").read_text()
    assert 'model: str = "gcn"' in source and 'dataset: str = "cora"' in source  # the defaults are not counted


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the graphnorm modules it imports anywhere (module level or inside functions). ``from a import b``
    counts ``a.b`` when that is a module, else ``a``; importing a module also runs its packages' ``__init__``."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in modules else base)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_import_graph_sees_function_level_imports() -> None:
    graph = import_graph()
    assert "graphnorm.models" in graph["graphnorm.train.loop"]
    assert "graphnorm.data.registry" in graph["graphnorm.data"]
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]


def test_no_import_cycle_among_package_modules() -> None:
    graph = import_graph()
    # A package's __init__ importing its own submodules is how a package is built, not a cycle.
    graph = {name: {t for t in targets if not t.startswith(name + ".")} for name, targets in graph.items()}
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


# The package's layers, bottom first: a module may import from its own group and from lower layers only. Two groups
# on one layer do not import each other. The safe file writers and locks under every other module.
LAYERS = (
    ("graphnorm.files",),
    ("graphnorm", "graphnorm.checks", "graphnorm.numba_kernels", "graphnorm.escaping"),
    ("graphnorm.data", "graphnorm.norms"),
    ("graphnorm.models",),
    ("graphnorm.analysis",),
    ("graphnorm.config",),
    ("graphnorm.train",),
    ("graphnorm.sweep", "graphnorm.predict"),
    ("graphnorm.cli",),
    ("graphnorm.__main__",),
)


def group_of(module: str) -> tuple[int, str]:
    """(layer, group) of a graphnorm module: the longest group name that is the module or a package above it."""
    found = [
        (index, group)
        for index, groups in enumerate(LAYERS)
        for group in groups
        if module == group or module.startswith(group + ".")
    ]
    assert found, f"{module} is in no layer: add it to LAYERS"
    return max(found, key=lambda pair: len(pair[1]))


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, targets in graph.items():
        layer, group = group_of(module)
        for target in targets:
            target_layer, target_group = group_of(target)
            if target_group != group and target_layer >= layer:
                problems.append(f"{module} (layer {layer}) imports {target} (layer {target_layer})")
    return sorted(problems)


def test_imports_point_down_the_layers() -> None:
    """Data and norms at the bottom, then models, analysis, the run configuration, training, sweeps, the CLI on top;
    counting imports inside functions."""
    assert layer_violations(import_graph()) == []


def test_layer_check_sees_an_upward_import() -> None:
    graph = {"graphnorm.models.gcn": {"graphnorm.config"}, "graphnorm.config": {"graphnorm.models.gcn"}}
    assert layer_violations(graph) == ["graphnorm.models.gcn (layer 3) imports graphnorm.config (layer 5)"]
    assert layer_violations({"graphnorm.data.task": {"graphnorm.norms.reductions"}})  # same layer, other group


def test_package_root_keeps_only_entry_points() -> None:
    root_modules = sorted(path.stem for path in PACKAGE.glob("*.py"))
    entry_points = ["__init__", "__main__", "cli"]  # the commands' bodies live in their packages
    foundations = ["checks", "edges", "escaping", "files", "memory", "numba_kernels", "threads"]  # the bottom layer
    assert root_modules == sorted(entry_points + foundations)
