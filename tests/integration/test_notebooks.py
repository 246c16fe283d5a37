"""The notebooks: run top to bottom on the embedded models, stored with their outputs.

Each notebook is executed here (so it never rots), shows real progress bars (ipywidgets,
no "IProgress not found" warning), and is stored in the repository with the outputs of a
run (hypotheses, scores, plots), so they can be read on a code host without running
anything. Every module a notebook imports is declared by hyde-lc's ``notebooks`` extra.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from packaging.requirements import Requirement

pytestmark = pytest.mark.integration
NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))
IDS = [p.stem for p in NOTEBOOKS]
# What each notebook must print when it worked (a notebook without an entry fails).
EXPECTED = {
    "quickstart": (
        "added",
        "hypothesis:",
        "hybrid-hyde",
        "Sources:",
        "answer tokens streamed",
        "itemgetter('question') | retriever",
        "LCEL:",
    ),
    "evaluation": ("added", "hypothesis:", "hypothesis ", "local model (no charge)", "rouge"),
}
IMAGES = {"quickstart": 0, "evaluation": 3}
WIDGET = "application/vnd.jupyter.widget-view+json"


def outputs(notebook: nbformat.NotebookNode) -> list[dict]:
    return [o for cell in notebook.cells for o in cell.get("outputs", [])]


def printed(notebook: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in outputs(notebook))


def images(notebook: nbformat.NotebookNode) -> int:
    return len([o for o in outputs(notebook) if "image/png" in o.get("data", {})])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_executes_with_progress_bars(path, tmp_path, monkeypatch):
    monkeypatch.setenv("HYDE_LC_QUICKSTART_LLM", "local:smollm2-135m")
    monkeypatch.setenv("HYDE_LC_THREADS", os.environ.get("HYDE_LC_THREADS", "1"))
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":  # run from scratch, not from the stored outputs
            cell.outputs, cell.execution_count = [], None
    NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    assert not [o for o in outputs(notebook) if o.get("output_type") == "error"]
    text = printed(notebook)
    for marker in EXPECTED[path.stem]:
        assert marker in text, marker
    assert images(notebook) == IMAGES[path.stem]
    assert "IProgress not found" not in text and "TqdmWarning" not in text
    bars = [o for o in outputs(notebook) if WIDGET in o.get("data", {})]
    assert bars, "no progress bar widget (the ingest shows one)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_is_stored_with_its_outputs(path):
    """Readable without running: every code cell holds the outputs of a clean run."""
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.get("outputs") for cell in code), "a code cell without outputs"
    counts = [cell.get("execution_count") for cell in code]
    assert counts == list(range(1, len(code) + 1)), "not stored from one top-to-bottom run"
    assert not [o for o in outputs(notebook) if o.get("output_type") == "error"]
    text = printed(notebook)
    for marker in EXPECTED[path.stem]:
        assert marker in text, marker
    assert images(notebook) == IMAGES[path.stem]
    assert "IProgress not found" not in text


def _imported_modules(notebook: nbformat.NotebookNode) -> set[str]:
    names = set()
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        # top-level `await` is valid in a notebook, not in a module: parse it in a function
        source = "async def _cell():\n" + "\n".join(
            f"    {line}" for line in cell.source.splitlines()
        )
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _declared(extras: set[str]) -> set[str]:
    """Distributions hyde-lc requires directly, with ``extras`` (followed through itself)."""
    names, todo, seen = set(), set(extras), set()
    while todo:
        extra = todo.pop()
        seen.add(extra)
        for line in metadata.requires("hyde-lc") or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": extra}):
                continue
            name = re.sub(r"[-_.]+", "-", req.name).lower()
            if name == "hyde-lc":
                todo |= set(req.extras) - seen
            else:
                names.add(name)
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_import_is_declared_by_the_notebooks_extra(path):
    declared = _declared({"notebooks"})
    providers = metadata.packages_distributions()
    undeclared = []
    for module in sorted(_imported_modules(nbformat.read(path, as_version=4))):
        if module in sys.stdlib_module_names or module == "hyde_lc":
            continue
        dists = {re.sub(r"[-_.]+", "-", d).lower() for d in providers.get(module, [])}
        if not dists & declared:
            undeclared.append(f"{module} ({', '.join(sorted(dists)) or 'not installed'})")
    assert not undeclared, f"imported but not declared in hyde-lc[notebooks]: {undeclared}"
