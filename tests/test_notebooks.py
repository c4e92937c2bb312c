"""The notebooks run top to bottom (small budgets are set inside them)."""

from __future__ import annotations

import os

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import ROOT

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

NOTEBOOKS = os.path.join(ROOT, "notebooks")


def _execute(name: str) -> nbformat.NotebookNode:
    notebook = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    client = NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": NOTEBOOKS}})
    client.execute()  # Raises CellExecutionError, with the cell and its traceback, on any failure.
    return notebook


def _text(notebook: nbformat.NotebookNode) -> str:
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", "") or "".join(output.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


def _has_image(notebook: nbformat.NotebookNode) -> bool:
    return any("image/png" in output.get("data", {}) for cell in notebook.cells for output in cell.get("outputs", []))


@pytest.fixture(autouse=True)
def notebook_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RL_NOTEBOOK_OUTPUT", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.delenv("RL_SWEEP_DIR", raising=False)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")


def test_quickstart_notebook_trains_and_plots(tmp_path):
    notebook = _execute("quickstart.ipynb")
    text = _text(notebook)
    assert "final evaluation return" in text and "after 1500 actor steps" in text
    assert _has_image(notebook)
    (run,) = [name for name in os.listdir(tmp_path) if name.startswith("quickstart_")]
    assert os.path.exists(tmp_path / run / "summary.json")


def test_analysis_notebook_plots_groups_and_final_table(tmp_path):
    notebook = _execute("analysis.ipynb")
    text = _text(notebook)
    assert "4 runs" in text and "final evaluator/episode_return per group" in text
    assert "1e-3" in text and "3e-4" in text
    assert _has_image(notebook)
    # rliable's comparison of the two learning rates on the sweep's real summaries.
    assert "normalised final_eval_return (0: random policy, 1: solved) per group (CartPole-v1: 22.7 -> 0" in text
    assert "probability of improvement: P(X > Y)" in text
    images = sum("image/png" in output.get("data", {}) for cell in notebook.cells for output in cell.get("outputs", []))
    assert images == 4  # The curves, then aggregates, profiles and improvement.
    (figures,) = [name for name in os.listdir(tmp_path) if name.startswith("aggregates_")]
    assert sorted(os.listdir(tmp_path / figures)) == ["aggregates.png", "improvement.png", "profiles.png"]
