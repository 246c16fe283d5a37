"""Run the notebooks top to bottom on the small local model and store them with outputs.

    .venv/bin/python scripts/store_notebooks.py [notebooks/NAME.ipynb ...]   (make notebooks)

The stored outputs (hypotheses, answers, scores, plots) let a reader see a run on a code
host without running anything; tests/integration/test_notebooks.py checks they are there
and that the notebooks still run. Progress bars are ipywidgets: their state is stored in
the notebook, and each bar's plain-text form is set to its final state (a code host that
does not render widgets shows that text, not the bar's first frame).
"""

from __future__ import annotations

import html
import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
WIDGET = "application/vnd.jupyter.widget-view+json"
STATE = "application/vnd.jupyter.widget-state+json"


def _text(state: dict, ref: str) -> str:
    model = state.get(ref.removeprefix("IPY_MODEL_"), {}).get("state", {})
    return html.unescape(str(model.get("value", ""))).replace("\u2007", " ")


def final_bar_text(notebook: nbformat.NotebookNode) -> None:
    """Set each tqdm widget's text/plain to its final ``prefix |bar| postfix``."""
    state = notebook.metadata.get("widgets", {}).get(STATE, {}).get("state", {})
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET)
            box = state.get(view["model_id"], {}) if view else {}
            children = box.get("state", {}).get("children", [])
            if len(children) != 3:  # tqdm's HBox: prefix HTML, FloatProgress, postfix HTML
                continue
            bar = state.get(children[1].removeprefix("IPY_MODEL_"), {}).get("state", {})
            done = bar.get("value", 0) / bar["max"] if bar.get("max") else 1.0
            filled = "█" * round(10 * min(done, 1.0))
            output["data"]["text/plain"] = (
                f"{_text(state, children[0])}|{filled:<10}|{_text(state, children[2])}"
            )


def store(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    notebook.metadata.pop("widgets", None)
    NotebookClient(
        notebook,
        timeout=900,
        kernel_name="python3",
        coalesce_streams=True,
        store_widget_state=True,
        resources={"metadata": {"path": tempfile.mkdtemp(prefix="hyde-notebook-")}},
    ).execute()
    final_bar_text(notebook)
    nbformat.write(notebook, path)
    print("stored", path.relative_to(ROOT))


def main() -> None:
    os.environ.setdefault("HYDE_LC_QUICKSTART_LLM", "local:smollm2-135m")
    os.environ.setdefault("HYDE_LC_THREADS", "1")
    paths = [Path(p).resolve() for p in sys.argv[1:]] or sorted(
        (ROOT / "notebooks").glob("*.ipynb")
    )
    for path in paths:
        store(path)


if __name__ == "__main__":
    main()
