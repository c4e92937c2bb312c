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
MAX_PROBES = 8  # getattr/hasattr, each on a foreign object (a module, sys, another library's class).


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
    switch = re.compile(r'== "(on_policy|off_policy|queue|transitions|sequences)"')
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
        if re.search(r"\b(getattr|hasattr)\(", line)
    ]
    assert len(probes) <= MAX_PROBES, probes
    lines = {path: source.splitlines() for path, source in _sources().items()}
    unexplained = [
        f"{path}:{number}" for path, number, line in probes if "#" not in line and "#" not in lines[path][number - 2]
    ]
    assert unexplained == []
