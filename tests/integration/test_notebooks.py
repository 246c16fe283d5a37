"""The notebooks run top to bottom on the embedded models, so they never rot."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.integration
NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))
# What each notebook must print when it worked (a notebook without an entry fails).
EXPECTED = {
    "quickstart": ("added", "hypothesis:"),
    "evaluation": ("added", "hypothesis:", "hypothesis ", "local model (no charge)", "rouge"),
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("HYDE_LC_QUICKSTART_LLM", "local:smollm2-135m")
    monkeypatch.setenv("HYDE_LC_THREADS", os.environ.get("HYDE_LC_THREADS", "1"))
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    for marker in EXPECTED[path.stem]:
        assert marker in text, marker
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == (3 if path.stem == "evaluation" else 0)
