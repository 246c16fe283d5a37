"""The README's process-pool recipe runs as a user runs it: saved as a script, run by Python.

Spawned workers import the script (its ``__main__`` guard keeps them out of the pool), so
it cannot run inside the test process: it is written to a file and run in a subprocess,
in a folder whose ``./.hyde_lc`` holds the sample PDF, with the small local writer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import ROOT
from tests.readme import own_block

pytestmark = pytest.mark.integration


def test_the_process_pool_recipe_runs_as_a_script(tmp_path: Path, sample_store_dir: Path) -> None:
    shutil.copytree(sample_store_dir, tmp_path / ".hyde_lc")
    (tmp_path / "pool.py").write_text(own_block(__file__), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HYDE_LC_HYPOTHESIS_LLM": "local:smollm2-135m",
    }
    env.pop("OPENAI_API_KEY", None)
    done = subprocess.run(
        [sys.executable, "pool.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 4 and all("lighthouses.pdf" in line for line in lines), done.stdout
    config = json.loads((tmp_path / "retriever.json").read_text())
    assert config["store"]["path"] == str((tmp_path / ".hyde_lc").resolve())
    assert config["hypothesis_llm"]["spec"] == "local:smollm2-135m"
