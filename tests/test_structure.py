"""What keeps rl/ readable (issue 40): short functions, types that decide rather than strings, capabilities
declared rather than probed, compiled systems that know no agent. Imports are kept in layers by import-linter
(`lint-imports`, run by scripts/test.sh; pyproject.toml holds the contracts)."""

from __future__ import annotations

import ast
import os
import re

import pytest

from conftest import ROOT

# Runs once, in the current stack's part: its subject (text, config schemas) is the same on both stacks.
pytestmark = pytest.mark.current

RL = os.path.join(ROOT, "rl")
MAX_FUNCTION_LINES = 60
MAX_PROBES = 8  # getattr/hasattr/vars(...)[...], each on a foreign object or a name checked first.


def _sources(*parts: str) -> dict[str, str]:
    found = {}
    for root, _, names in os.walk(os.path.join(RL, *parts)):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path) as file:
                    found[os.path.relpath(path, ROOT)] = file.read()
    return found


def test_no_function_in_rl_is_longer_than_60_lines():
    long = [
        f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, source in _sources().items()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


def test_every_module_in_rl_opens_by_saying_its_job():
    """A module's docstring is where a reader learns what it is for (and that it has one job)."""
    silent = [path for path, source in _sources().items() if not ast.get_docstring(ast.parse(source))]
    assert silent == []


def test_replay_and_compiled_system_kinds_are_types_not_strings():
    kinds = "on_policy|off_policy|queue|transitions|sequences|q_values|policy_value|actor_critic|recurrent_q"
    switch = re.compile(rf'== "({kinds})"')
    assert [
        f"{path}: {line.strip()}"
        for path, source in _sources().items()
        for line in source.splitlines()
        if switch.search(line)
    ] == []


def test_the_compiled_path_imports_no_agent():
    agents = re.compile(r"^\s*(from rl\.agents|import rl\.agents)", re.MULTILINE)
    assert [
        path for path, source in {**_sources("anakin"), **_sources("systems")}.items() if agents.search(source)
    ] == []


def test_probing_for_attributes_is_rare_and_each_probe_says_why():
    probes = [
        (path, number, line)
        for path, source in _sources().items()
        for number, line in enumerate(source.splitlines(), 1)
        if re.search(r"\b(getattr|hasattr)\(|\bvars\([^)]*\)\[", line)  # A name looked up in `vars()` is a probe too.
    ]
    assert len(probes) <= MAX_PROBES, probes
    lines = {path: source.splitlines() for path, source in _sources().items()}
    unexplained = [
        f"{path}:{number}" for path, number, line in probes if "#" not in line and "#" not in lines[path][number - 2]
    ]
    assert unexplained == []


def _identifier(node: ast.AST) -> str | None:
    """The name an expression ends in: `nodes` for `nodes`, `self.nodes` and `launcher.nodes`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _nodes_classes(trees: dict[str, ast.Module]) -> set[str]:
    """`Nodes` and every class that derives from it, in any module."""
    found = {"Nodes"}
    grown = True
    while grown:
        classes = [node for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
        derived = {node.name for node in classes if any(_identifier(base) in found for base in node.bases)}
        grown = not derived <= found
        found |= derived
    return found


def _names_of_nodes(tree: ast.Module, classes: set[str]) -> set[str]:
    """What holds a `Nodes` object in `tree`: anything named `nodes`, parameters annotated with a `Nodes`
    class, and names (or attributes) given a new `Nodes` object or one of those."""
    names = {"nodes"}
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            annotation = ast.unparse(node.annotation)
            if any(re.search(rf"\b{name}\b", annotation) for name in classes):
                names.add(node.arg)
    grown = True
    while grown:
        before = len(names)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign):
                continue
            value = node.value.func if isinstance(node.value, ast.Call) else node.value
            if _identifier(value) in classes | names:
                names |= {_identifier(target) for target in node.targets} - {None}
        grown = len(names) > before
    return names


def _assignments_to_nodes(source: str, classes: set[str]) -> list[str]:
    """Statements outside a `Nodes` class that set an attribute of a `Nodes` object (or call `setattr` on one)."""
    tree = ast.parse(source)
    names = _names_of_nodes(tree, classes)
    inside = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name in classes
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in inside:
            continue
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = [item for target in node.targets for item in ast.walk(target)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and _identifier(node.func) == "setattr" and node.args:
            targets = [ast.Attribute(value=node.args[0], attr="?")]
        if any(isinstance(target, ast.Attribute) and _identifier(target.value) in names for target in targets):
            found.append(f"{node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return found


def _python_sources(*roots: str) -> dict[str, str]:
    sources = {}
    for root in roots:
        for directory, _, files in os.walk(os.path.join(ROOT, root)):
            for name in (name for name in files if name.endswith(".py")):
                path = os.path.join(directory, name)
                with open(path) as file:
                    sources[os.path.relpath(path, ROOT)] = file.read()
    return sources


def test_nothing_outside_a_nodes_class_sets_attributes_of_its_objects():
    """A run hands its nodes one context at `start` (rl.experiments.lifecycle.RunContext); no one else writes
    into them."""
    sources = _python_sources("rl", "hydra_plugins", "scripts")
    classes = _nodes_classes({path: ast.parse(source) for path, source in sources.items()})
    assert {"LocalNodes", "RayNodes", "AnakinNodes", "SebulbaNodes"} <= classes
    found = [f"{path}:{line}" for path, source in sources.items() for line in _assignments_to_nodes(source, classes)]
    assert found == []


def test_the_nodes_attribute_check_finds_what_it_looks_for():
    classes = {"Nodes", "AnakinNodes"}
    injected = """
class Run:
    def __init__(self, experiment, nodes):
        nodes.experiment, nodes.record = experiment, None
        self.nodes = nodes
        self.nodes.stop = None

def grid(values):
    group = AnakinNodes(1)
    group.values = values
    setattr(group, "trials", [])

def given(target: "AnakinNodes"):
    target.memory += 1

class AnakinNodes(Nodes):
    def start(self, context):
        self.context = context
"""
    lines = sorted(int(line.split(":")[0]) for line in _assignments_to_nodes(injected, classes))
    assert lines == [4, 6, 10, 11, 14]


MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "add", "discard", "popitem"}


def _module_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level, its imports of `rl` names included."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rl"):
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _module_state_writes(source: str) -> list[str]:
    """Statements in functions that write module state: `global`, and an item set on (or a mutating method
    called on) a name the module binds at its top level, where the function does not bind it itself."""
    tree = ast.parse(source)
    module = _module_names(tree)
    found = []
    for function in (node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))):
        arguments = function.args
        local = {arg.arg for arg in arguments.args + arguments.kwonlyargs + arguments.posonlyargs}
        local |= {
            name.id
            for node in ast.walk(function)
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.For, ast.With, ast.comprehension))
            for name in ast.walk(node)
            if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store)
        }
        imported = {
            alias.asname or alias.name
            for node in ast.walk(function)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rl")
            for alias in node.names
        }
        shared = (module | imported) - local
        for node in ast.walk(function):
            written = None
            if isinstance(node, ast.Global):
                written = ", ".join(node.names)
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for item in (item for target in targets for item in ast.walk(target)):
                    if isinstance(item, ast.Subscript) and _identifier(item.value) in shared:
                        written = _identifier(item.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                if isinstance(node.func.value, ast.Name) and node.func.value.id in shared:
                    written = node.func.value.id
            if written:
                found.append(f"{node.lineno} ({written})")
    return found


# Module state still written at run time, each a process-wide resource rather than a channel between modules.
KEPT_MODULE_STATE = {
    "_state": "rl/lazy_tensorflow.py: TensorFlow, imported once per process when first needed",
    "_FILES": "rl/loggers/csv.py: the open CSV files, shared by the loggers that write one path",
    "_registered": "rl/environments/factories.py: the ids registered with gymnasium's own registry",
    "_WATCHER": "rl/experiments/signal_watcher.py: the process's signal watcher (one wakeup descriptor a process)",
}


def test_no_function_in_rl_writes_module_state():
    """What a run shares is passed to it (the run's context, a logger factory), not left in a module for
    another to read: no `global`, no module-level container filled at run time but the process-wide resources
    in KEPT_MODULE_STATE."""
    found = [
        f"{path}:{line}"
        for path, source in _python_sources("rl").items()
        for line in sorted(set(_module_state_writes(source)))
        if line.split("(")[1].rstrip(")") not in KEPT_MODULE_STATE
    ]
    assert found == []


def test_the_module_state_check_finds_what_it_looks_for():
    source = """
from rl.loggers.base import PREFIX
SEEN = []
CHOSEN = None

def choose(value, SEEN2):
    global CHOSEN
    CHOSEN = value
    SEEN.append(value)
    PREFIX["text"] = value

def imported(value):
    from rl.loggers.base import JOB
    JOB.update(text=value)

def local():
    SEEN = []
    SEEN.append(1)
"""
    assert sorted(_module_state_writes(source)) == ["10 (PREFIX)", "14 (JOB)", "7 (CHOSEN)", "9 (SEEN)"]


def _definitions(source: str, name: str) -> list[int]:
    """Where a module defines `name` at its top level: a class, or an assignment (a type alias)."""
    lines = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id == name for target in targets):
                lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("name", ["Learning", "Policy", "Batch"])
def test_each_contract_type_is_defined_once(name):
    """An agent's learning, its policy and a learner's batch: one definition each, in the lowest layer that
    needs it (rl/systems/learning.py, rl/systems/base.py, rl/core.py)."""
    found = [f"{path}:{line}" for path, source in _python_sources("rl").items() for line in _definitions(source, name)]
    assert len(found) == 1, found


def test_the_agent_builder_module_holds_the_builder_only():
    """rl/agents/builder.py has one job: the builder every agent subclasses (its learning and learner live in
    rl/systems/learning.py)."""
    with open(os.path.join(RL, "agents", "builder.py")) as file:
        tree = ast.parse(file.read())
    classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    functions = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert (classes, functions) == (["ActorLearnerBuilder"], [])


MAX_PACKED = 15  # Assignments of a tuple of values to a tuple of unrelated names, in all of rl/.


def _packed_assignments(source: str) -> list[int]:
    """`a, b = x, y`: names packed into one line that a reader unpacks; a swap (`a, b = b, a`) is not one."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        targets, value = node.targets[0], node.value
        if isinstance(targets, ast.Tuple) and isinstance(value, ast.Tuple):
            written = sorted(ast.unparse(target) for target in targets.elts)
            if written != sorted(ast.unparse(element) for element in value.elts):
                lines.append(node.lineno)
    return lines


def test_assignments_that_pack_unrelated_names_are_rare():
    packed = [f"{path}:{line}" for path, source in _sources().items() for line in _packed_assignments(source)]
    assert len(packed) <= MAX_PACKED, packed


def test_the_packed_assignment_count_finds_what_it_looks_for():
    source = "a, b = 1, 2\na, b = b, a\nx = 1, 2\nfirst, rest = items\nself.x, self.y = y, x\n"
    assert _packed_assignments(source) == [1, 5]


def test_the_lifecycle_imports_no_search():
    """A search reaches a run through its hooks (rl/experiments/hooks.py): the lifecycle imports no pruning,
    PBT, grid, sweep or W&B module."""
    with open(os.path.join(RL, "experiments", "lifecycle.py")) as file:
        tree = ast.parse(file.read())
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert [name for name in imported if re.search(r"prun|pbt|grid|sweep|wandb|optuna", name)] == []


def _imported_modules(path: str) -> list[str]:
    """Every module `path` imports, at any depth (a function's own imports too)."""
    with open(path) as file:
        tree = ast.parse(file.read())
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    return imported + [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]


@pytest.mark.parametrize("package", ["experiments", "local", "ray", "anakin", "sebulba"])
def test_no_layer_below_the_searches_imports_them(package):
    """The searches (rl/sweeps/: grids, engines, PBT, pruning, sweep results, jobs) are handed to a run as hooks
    and data; the lifecycle and the launchers' nodes below them import none (import-linter's layers say so too)."""
    found = []
    for directory, _, names in os.walk(os.path.join(RL, package)):
        for name in (name for name in names if name.endswith(".py")):
            path = os.path.join(directory, name)
            found += [f"{path}: {module}" for module in _imported_modules(path) if module.startswith("rl.sweeps")]
    assert found == []


def test_anakin_nodes_take_their_replicas_as_data():
    """`AnakinNodes` takes the chunk size and one frozen `ReplicaPlan` (a grid group's jobs, their hooks, a
    population, memory limits), not a parameter per kind of search."""
    import dataclasses
    import inspect

    from rl.anakin.driver import AnakinNodes
    from rl.experiments.replica_plan import ReplicaPlan

    parameters = [name for name in inspect.signature(AnakinNodes.__init__).parameters if name != "self"]
    assert len(parameters) <= 4, parameters
    assert dataclasses.fields(ReplicaPlan) and ReplicaPlan.__dataclass_params__.frozen
