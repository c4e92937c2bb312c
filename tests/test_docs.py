"""Docs that cannot drift: the README's table of config groups names exactly the options in conf/, every name and
path README.md and docs/*.md give exists in the repository, no doc points outside it, and docs/architecture.md's
layer picture is the import-linter contract scripts/test.sh checks.

The rule for names and paths. A span is the text between two backticks; fenced code blocks are examples of what a
reader writes (a new agent's files) and are not checked.
- A path: a word (in a span, a Markdown link or the prose) that starts with a top-level entry of the repository
  (`rl/`, `conf/`, `docs/`, `tests/`, ...) or is a root file (`pyproject.toml`), or a word in a span that ends in
  .py, .md, .sh, .ipynb, .toml or .ini (`builder.py`, `ray/launcher.py`: the end of some path). It must name an
  existing file or folder; `<name>` and `*` stand for any part of one name, and at least one file must match.
  Links are read from the doc's folder, and a path with `../` must stay inside the repository.
- An `rl.` name anywhere in a span (`rl.analysis.aggregates.SCORE_RANGES`, `rl.train:cli`) must resolve: the
  longest prefix is a module of rl/, the next part is defined at its top level, any further parts are words
  of the repository (below).
- A Python name: a span that is a CamelCase name (`FeedForwardActor`, `NodeBuilder.keys`), a call
  (`make_policy(...)`, `init(key)`), or a snake_case word with an underscore (`build_actor`). Each of its parts
  must be a word of the repository: a name its Python code defines or uses, an identifier in a string it writes
  (metric and summary keys), a key or an option (file name) under conf/, or a builtin. A removed or made-up name
  is none of these. Not checked as Python names: lowercase dotted names (`agent.batch_size`: config keys),
  spans with a space or `=` (commands, overrides), single lowercase words without an underscore (options, prose),
  and OTHER_PROGRAMS, the names of other programs' parts the docs quote.
"""

from __future__ import annotations

import ast
import builtins
import fnmatch
import functools
import glob
import os
import re
import subprocess
import tomllib

import pytest

from conftest import ROOT

# Runs once, in the current stack's part: its subject (text, config schemas) is the same on both stacks.
pytestmark = pytest.mark.current

GROUPS = ("environment", "network", "policy", "logger", "agent", "launcher", "observers", "experiment")
# Names the docs quote from other programs: Atari games, glibc's allocator, XLA's kernels.
OTHER_PROGRAMS = {"Pong", "Breakout", "SpaceInvaders", "_int_free", "_int_malloc", "malloc_consolidate"}
OTHER_PROGRAMS |= {"unlink_chunk", "lapack_sgeqrf_ffi", "ParallelBatchMap"}
NOT_THE_REPOSITORY = {".git", ".venv", ".venv-current", "outputs", "multirun", "wandb", "__pycache__", "build"}
PATH_ENDINGS = (".py", ".md", ".sh", ".ipynb", ".toml", ".ini")
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def readme_options(root: str = ROOT) -> dict[str, set[str]]:
    """{group: the option names its row lists}: backticked names outside parentheses."""
    with open(os.path.join(root, "README.md")) as file:
        text = file.read()
    table = text.split("### Config groups", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        group = cells[0].strip("`")
        if group in GROUPS:
            listed = re.sub(r"\([^()]*\)", "", " | ".join(cells[1:]))  # Explanations in parentheses are not options.
            rows[group] = set(re.findall(r"`([a-z][a-z0-9_]*)`", listed))
    return rows


def conf_options(group: str, root: str = ROOT) -> set[str]:
    return {name[: -len(".yaml")] for name in os.listdir(os.path.join(root, "conf", group)) if name.endswith(".yaml")}


def readme_lists_every_option(root: str = ROOT) -> list[str]:
    """What the README's config-group table gets wrong, one line a group (none: it is right)."""
    listed, wrong = readme_options(root), []
    for group in GROUPS:
        options = conf_options(group, root)
        if listed.get(group) != options:
            found = listed.get(group, set())
            wrong.append(
                f"README's {group} row lists {sorted(found - options)} beyond and lacks {sorted(options - found)}"
            )
    return wrong


@pytest.mark.parametrize("group", GROUPS)
def test_the_readme_lists_every_option_of_each_config_group_and_no_other(group):
    listed = readme_options()
    assert group in listed, f"README's config-group table has no row for {group}"
    assert listed[group] == conf_options(group), (
        f"README lists {sorted(listed[group] - conf_options(group))} that conf/{group}/ lacks, "
        f"and lacks {sorted(conf_options(group) - listed[group])}"
    )


def test_every_agent_option_is_a_package_under_rl_agents():
    packages = {name for name in os.listdir(os.path.join(ROOT, "rl", "agents")) if not name.startswith("_")}
    assert conf_options("agent") <= packages


# Every name and path the docs give exists.


@functools.cache
def repository_paths(root: str = ROOT) -> tuple[str, ...]:
    """Every file and folder (with a trailing /) of the repository, relative to its root: what git tracks or
    would add (not what it ignores: a file only in a local, ignored folder is missing from a clean clone); every
    file under `root` where it is no git work tree."""
    listed = subprocess.run(
        ["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"], capture_output=True, text=True
    )
    if listed.returncode == 0 and listed.stdout.strip():
        files = [path for path in listed.stdout.splitlines() if os.path.exists(os.path.join(root, path))]
        folders = {"/".join(path.split("/")[:end]) + "/" for path in files for end in range(1, path.count("/") + 1)}
        return tuple(sorted(folders) + files)
    paths = []
    for folder, folders, files in os.walk(root, followlinks=True):
        folders[:] = sorted(name for name in folders if name not in NOT_THE_REPOSITORY)
        relative = os.path.relpath(folder, root)
        prefix = "" if relative == "." else relative + "/"
        paths += [prefix + name + "/" for name in folders] + [prefix + name for name in files]
    return tuple(paths)


def _python_words(tree: ast.AST) -> set[str]:
    words = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words.add(node.name)
        elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
            words.add(node.arg)
        elif isinstance(node, ast.alias):
            words.update(node.name.split(".") + [node.asname or ""])
        elif isinstance(node, ast.ImportFrom):
            words.update((node.module or "").split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            words.update(re.findall(r"[A-Za-z_]\w*", node.value))
    return words


@functools.cache
def repository_words(root: str = ROOT) -> frozenset[str]:
    """The words a Python name in a doc may be (see the module's docstring)."""
    words = set(dir(builtins))
    for path in repository_paths(root):
        if path.endswith(".py") and path != "tests/test_docs.py":  # This file quotes made-up names.
            with open(os.path.join(root, path)) as file:
                words |= _python_words(ast.parse(file.read()))
        elif path.endswith(".yaml") and path.startswith("conf/"):
            words.add(os.path.basename(path)[: -len(".yaml")])
            with open(os.path.join(root, path)) as file:
                words.update(re.findall(r"^[\s-]*([A-Za-z_]\w*):", file.read(), re.MULTILINE))
    return frozenset(words - {""})


def top_level_names(path: str) -> set[str]:
    """The names a module defines or imports at its top level."""
    with open(path) as file:
        tree = ast.parse(file.read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names  # Nested definitions count too: a few too many names, never a missing one.


def rl_name_problem(name: str, root: str = ROOT) -> str | None:
    """Why `rl.x.y` (or `rl.x:y`) names nothing in rl/, or None."""
    parts = name.replace(":", ".").split(".")
    for end in range(len(parts), 0, -1):
        base = os.path.join(root, *parts[:end])
        module = next((p for p in (base + ".py", os.path.join(base, "__init__.py")) if os.path.isfile(p)), None)
        if module is None:
            continue
        rest = parts[end:]
        if rest and rest[0] not in top_level_names(module) and not os.path.isdir(os.path.join(base, rest[0])):
            return f"{'.'.join(parts[:end])} defines no {rest[0]}"
        unknown = [part for part in rest[1:] if part not in repository_words(root)]
        return f"{'.'.join(rest)}: no {unknown} in the repository" if unknown else None
    return "no such module"


def path_problem(word: str, folder: str, root: str = ROOT) -> str | None:
    """Why a path a doc in `folder` gives names no file or folder of the repository, or None."""
    pattern = re.sub(r"<[^<>]*>", "*", word)
    if "../" in word and os.path.normpath(os.path.join(folder, pattern)).startswith(".."):
        return "points outside the repository"
    paths = repository_paths(root)
    if "/" not in word and word.endswith(PATH_ENDINGS):  # A file name alone: some file's.
        found = any(fnmatch.fnmatch(os.path.basename(path), pattern) for path in paths)
        return None if found else "no such file"
    candidates = [pattern] if folder == "." else [pattern, os.path.normpath(os.path.join(folder, pattern))]
    if pattern.split("/")[0] + "/" not in paths and not pattern.startswith("."):
        candidates.append("*/" + pattern)  # The end of a path (`ray/launcher.py`).
    if any(fnmatch.filter(paths, c) or fnmatch.filter(paths, c.rstrip("/") + "/") for c in candidates):
        return None
    return "points outside the repository or at nothing" if "../" in word else "no such file or folder"


def doc_lines(path: str) -> list[tuple[int, str]]:
    """(line number, line) of a doc outside its fenced code blocks."""
    lines, fenced = [], False
    with open(path) as file:
        for number, line in enumerate(file, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced:
                lines.append((number, line.rstrip("\n")))
    return lines


def _is_path(word: str, where: str, tops: set[str]) -> bool:
    """Whether a word found in a span, a link or the prose is a path to check (see the module's docstring)."""
    if word.startswith(("http://", "https://", "#", "/", "~")) or "://" in word:
        return False
    if where == "link" or word.startswith("../") or word.split("/")[0] + "/" in tops and "/" in word or word in tops:
        return True
    return where == "span" and word.endswith(PATH_ENDINGS) and re.fullmatch(r"[\w./<>*-]+", word) is not None


def _python_name_parts(span: str) -> list[str]:
    """The parts of a span that must be repository words when it reads as a Python name (see the docstring)."""
    if span in OTHER_PROGRAMS:
        return []
    call = re.fullmatch(r"([A-Za-z_][\w.]*)\(.*\)", span)
    if call:
        return call.group(1).split(".")
    if re.fullmatch(r"[A-Z]\w*[a-z]\w*(\.\w+)*", span) or re.fullmatch(r"[a-z_][a-z0-9]*_[a-z0-9_]*", span):
        return span.split(".")
    return []


def doc_problems(doc: str, root: str = ROOT) -> list[str]:
    """Every name or path in `doc` (relative to the root) that the repository lacks, as `doc:line: why`."""
    folder = os.path.dirname(doc) or "."
    tops = {path for path in repository_paths(root) if path.count("/") <= 1 and path.endswith("/")}
    tops |= {path for path in repository_paths(root) if "/" not in path}
    problems = []
    for number, line in doc_lines(os.path.join(root, doc)):
        spans = SPAN.findall(line)
        words = [(word, "span") for span in spans for word in span.split()]
        words += [(link, "link") for link in LINK.findall(line)]
        prose = SPAN.sub(" ", LINK.sub(" ", line))
        words += [(word, "prose") for word in re.findall(r"(?<![\w/.])(?:\.\./)*[\w.-]+/[\w./<>*-]*", prose)]
        for word, where in words:
            word = word.rstrip(".,;:)").split("#")[0]
            if word and _is_path(word, where, tops) and (why := path_problem(word, folder, root)):
                problems.append(f"{doc}:{number}: {word}: {why}")
        for span in spans:
            for name in re.findall(r"(?<![\w./])rl(?:[.:]\w+)+", span):
                if why := rl_name_problem(name, root):
                    problems.append(f"{doc}:{number}: {name}: {why}")
            missing = [part for part in _python_name_parts(span.strip()) if part not in repository_words(root)]
            if missing:
                problems.append(f"{doc}:{number}: {span}: the repository has no {', '.join(missing)}")
    return problems


def docs(root: str = ROOT) -> list[str]:
    return ["README.md", *sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))]


@pytest.mark.parametrize("doc", docs())
def test_every_name_and_path_a_doc_gives_exists_in_the_repository(doc):
    problems = doc_problems(doc)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "made_up",
    ["`rl.experiments.merge_runs`", "`rl/agents/dqn/losses.py`", "`merge_evaluations`", "`FeedForwardCritic`"]
    + ["`scale_rewards(batch)`", "see ../shared/DESIGN.md", "[the design](../../DESIGN.md)", "`docs/nothing.md`"],
)
def test_a_made_up_name_or_path_in_a_doc_is_found(tmp_path, made_up):
    for name in ("rl", "conf", "docs"):
        os.symlink(os.path.join(ROOT, name), tmp_path / name)
    with open(os.path.join(ROOT, "README.md")) as file:
        text = file.read()
    (tmp_path / "README.md").write_text(text + f"\nA new line names {made_up}.\n")
    problems = doc_problems("README.md", str(tmp_path))
    assert [problem for problem in problems if problem.startswith(f"README.md:{text.count(chr(10)) + 2}:")]


def test_config_keys_commands_and_placeholders_are_not_taken_for_names_or_paths(tmp_path):
    for name in ("rl", "conf", "docs", "scripts"):
        os.symlink(os.path.join(ROOT, name), tmp_path / name)
    spans = "`agent.batch_size` `python scripts/plot.py --seeds 3` `conf/agent/<name>.yaml` `logs/<label>.csv`"
    (tmp_path / "README.md").write_text(f"{spans} `environment.name=Pong` `summary.json` `ppo` `rl/agents/*/`\n")
    assert doc_problems("README.md", str(tmp_path)) == []


# docs/architecture.md's layer picture and its list of the files one DQN step passes through.


def _section(heading: str) -> str:
    with open(os.path.join(ROOT, "docs", "architecture.md")) as file:
        text = file.read()
    assert heading in text, f"docs/architecture.md has no section {heading!r}"
    return text.split(heading, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def test_the_layer_picture_is_the_import_linter_contract():
    block = _section("## Layers").split("```", 2)[1]
    picture = [" | ".join(part.strip() for part in line.split("|")) for line in block.strip().splitlines()]
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        contracts = tomllib.load(file)["tool"]["importlinter"]["contracts"]
    (layers,) = [contract for contract in contracts if contract["type"] == "layers"]
    assert layers["containers"] == ["rl"] and layers["exhaustive"]
    assert picture == [" | ".join(part.strip() for part in layer.split("|")) for layer in layers["layers"]]


def test_the_files_one_dqn_step_passes_through_exist():
    steps = re.findall(r"^\d+\. `([^`]+)`", _section("### One DQN step"), re.MULTILINE)
    assert 0 < len(steps) <= 8
    assert [path for path in steps if not os.path.isfile(os.path.join(ROOT, path))] == []


def test_the_readme_reads_in_ten_minutes():
    """The quick start, the concepts and an index: at most 300 lines and 2,000 words (ten minutes at 200 words a
    minute, a pace for technical prose); the details live in docs/."""
    with open(os.path.join(ROOT, "README.md")) as file:
        text = file.read()
    assert len(text.splitlines()) <= 300
    assert len(text.split()) <= 2000, f"README.md has {len(text.split())} words"


# docs/architecture.md's launchers and their nodes, and docs/host_environments.md's interface, held to the code.


def _classes_with_base(base: str) -> dict[str, str]:
    """Every class in rl/ whose bases include `base` (a bare name or `module.base`), by name: its file."""
    found = {}
    for path in glob.glob(os.path.join(ROOT, "rl", "**", "*.py"), recursive=True):
        with open(path) as file:
            tree = ast.parse(file.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b).split(".")[-1] == base for b in node.bases):
                found[node.name] = os.path.relpath(path, ROOT)
    return found


def test_the_architecture_page_names_every_launcher_and_its_nodes_and_no_other():
    """Section 2's table and lists name each `Launcher` and each `Nodes` subclass in rl/, and no `...Nodes` that
    is not one; every launcher module ends its run in the one call the section quotes."""
    with open(os.path.join(ROOT, "docs", "architecture.md")) as file:
        section = file.read().split("## 2. ", 1)[1].split("\n## 3. ", 1)[0]
    spans = set(SPAN.findall(section))
    launchers, nodes = _classes_with_base("Launcher"), _classes_with_base("Nodes")
    assert len(launchers) == 4 and len(nodes) == 4, (launchers, nodes)
    assert sorted((set(launchers) | set(nodes)) - spans) == []
    assert sorted(span for span in spans if re.fullmatch(r"[A-Z]\w*Nodes", span) and span not in nodes) == []
    call = "lifecycle.run(lifecycle.RunContext.make(experiment), nodes, experiment.hooks)"
    assert call in spans
    for path in sorted(set(launchers.values())):
        with open(os.path.join(ROOT, path)) as file:
            assert call in file.read(), f"{path} does not end its run in {call}"


def test_the_host_environment_page_names_host_vectors_interface():
    """docs/host_environments.md's "The interface" lists exactly `HostVector`'s public attributes and methods, and
    says "Abstract." of exactly its abstract ones."""
    with open(os.path.join(ROOT, "rl", "environments", "host.py")) as file:
        (host_vector,) = [n for n in ast.parse(file.read()).body if getattr(n, "name", None) == "HostVector"]
    methods = [n for n in host_vector.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    members = {n.name for n in methods} | {n.target.id for n in host_vector.body if isinstance(n, ast.AnnAssign)}
    abstract = {n.name for n in methods if any(ast.unparse(d).endswith("abstractmethod") for d in n.decorator_list)}
    with open(os.path.join(ROOT, "docs", "host_environments.md")) as file:
        section = file.read().split("## The interface", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"^- ", section, flags=re.MULTILINE)[1:]
    named = {re.match(r"`(\w+)", item).group(1): item for item in items}
    assert set(named) == members
    assert {name for name, item in named.items() if "Abstract." in item} == abstract
