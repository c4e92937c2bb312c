"""The README's table of config groups names exactly the options in conf/ (docs that cannot drift)."""

from __future__ import annotations

import os
import re

import pytest

from conftest import ROOT

GROUPS = ("environment", "network", "policy", "logger", "agent", "launcher", "observers", "experiment")


def readme_options() -> dict[str, set[str]]:
    """{group: the option names its row lists}: backticked names outside parentheses."""
    with open(os.path.join(ROOT, "README.md")) as file:
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


def conf_options(group: str) -> set[str]:
    return {name[: -len(".yaml")] for name in os.listdir(os.path.join(ROOT, "conf", group)) if name.endswith(".yaml")}


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
