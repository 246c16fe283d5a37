"""A plain LCEL script on the local models ends with exit status 0, run after run.

The script is what a user writes: an embedder and a llama.cpp writer from
``hyde_lc.models.loading``, the bundled sample in a store, a HyDE retriever in an answer
chain, print, end. Its last search starts a background audit of the store's BM25 index
(the audit interval is 1 s here; 10 minutes by default, so a script run again on the same
store meets it too), which is still running inside Chroma's native code when the script
ends: before hyde_lc ended its own threads at exit, Python's finalisation ended that thread
mid-call and the process died with SIGSEGV after its last print. Runs go two at a time, as
on a busy machine; each run has its own copy of the store (a process's audit claims the
store for the interval, so two runs on one store would not both start one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hyde_lc.models.loading import DEFAULT_HYPOTHESIS_LLM

pytestmark = pytest.mark.integration
ROOT = Path(__file__).parents[2]

SCRIPT = """
import sys
import threading
import time

from hyde_lc import HyDERetriever, build_answer_chain, ingest_paths, open_store, sample_files
from hyde_lc.models.loading import load_embeddings, load_llm

folder, model = sys.argv[1], sys.argv[2]
store = open_store(folder, embeddings=load_embeddings())
ingest_paths(sample_files(), store, progress=False)  # already there: nothing to embed
writer = load_llm(model, role="hypothesis", max_tokens=16)
answerer = load_llm(model, role="answer", max_tokens=16)
retriever = HyDERetriever(vectorstore=store, hypothesis_llm=writer, k=3)
chain = build_answer_chain(retriever, answerer)
print("answer:", chain.invoke("How did the Fresnel lens change lighthouses?")["answer"])
time.sleep(1.5)  # the audit interval passes: the next search starts an audit
pages = [doc.metadata["page_label"] for doc in retriever.invoke("Who designed the Pharos?")]
print("pages:", pages, "threads:", [t.name for t in threading.enumerate()], flush=True)
"""


def run_script(folder: Path, model: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HYDE_LC_AUDIT_INTERVAL": "1",
        "HYDE_LC_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "PYTHONFAULTHANDLER": "1",
    }
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(folder), model],
        cwd=folder.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def run_in_pairs(sample_store_dir: Path, tmp_path: Path, model: str, runs: int) -> None:
    folders = []
    for n in range(runs):
        folders.append(tmp_path / f"store-{n}")
        shutil.copytree(sample_store_dir, folders[-1])
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda folder: run_script(folder, model), folders))
    failed = [(r.returncode, r.stderr[-2000:]) for r in done if r.returncode != 0]
    assert not failed, f"{len(failed)} of {runs} runs did not exit cleanly: {failed}"
    assert all("pages:" in r.stdout for r in done), [r.stdout for r in done]
    # the runs did meet the case: an audit was still running when the script ended
    assert any("hyde_lc-audit" in r.stdout for r in done), [r.stdout for r in done]


def test_a_script_on_the_local_models_exits_cleanly_every_time(sample_store_dir, tmp_path):
    run_in_pairs(sample_store_dir, tmp_path, "local:smollm2-135m", runs=4)


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("HYDE_LC_SLOW_TESTS"),
    reason="loads the default hypothesis writer (Qwen 0.5B); set HYDE_LC_SLOW_TESTS=1",
)
def test_a_script_with_the_default_writer_exits_cleanly_every_time(sample_store_dir, tmp_path):
    run_in_pairs(sample_store_dir, tmp_path, DEFAULT_HYPOTHESIS_LLM, runs=4)
