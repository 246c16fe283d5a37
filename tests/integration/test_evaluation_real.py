"""Evaluation on the real thing: SmolLM2 via llama.cpp, MiniLM, Chroma on disk, the CLI."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langchain_core.callbacks import UsageMetadataCallbackHandler

from hyde_lc import load_llm, open_store
from hyde_lc.evaluation import EvaluationPipeline, read_records, results_table, score_records
from tests.fakes import ROOT, default_embedding_id

pytestmark = pytest.mark.integration
HYDE_LC = str(Path(sys.executable).parent / "hyde-lc")
SAMPLE_QUESTIONS = ROOT / "hyde_lc" / "sample" / "questions.jsonl"
TIMING_KEYS = {"execution_time", "hypothesis_time", "retrieval_time", "answer_time", "timings"}


@pytest.fixture(scope="module")
def store_dir(sample_store_dir):
    return sample_store_dir  # read only: evaluate and compare never write to the store


@pytest.fixture(scope="module")
def smol():
    return load_llm("local:smollm2-135m", role="answer", max_tokens=48)


@pytest.fixture(scope="module")
def records(store_dir, smol):
    """Three real records; one model object serves both stages."""
    handler = UsageMetadataCallbackHandler()
    pipeline = EvaluationPipeline.from_settings(
        store=open_store(store_dir),
        custom_hyde_llm=smol,
        custom_answer_llm=smol,
        k=3,
        callbacks=[handler],
    )
    rows = [json.loads(line) for line in SAMPLE_QUESTIONS.read_text("utf-8").splitlines()][:3]
    out = [pipeline.run(r["question"], reference=r["reference"]) for r in rows]
    return out, handler


def test_real_model_tokens_are_per_stage_non_zero_and_distinct(records):
    out, handler = records
    for record in out:
        meta = record["metadata"]
        hyp, emb, ans = (meta["stages"][s] for s in ("hypothesis", "embedding", "answer"))
        assert meta["fallback"] is None
        assert meta["retrieval_method"] == "hybrid-hyde" and meta["lexical"] is True
        assert hyp["model_id"] == ans["model_id"] and ".gguf" in hyp["model_id"]
        for stage in (hyp, ans):
            assert stage["input_tokens"] > 0 and stage["output_tokens"] > 0
            assert stage["usage_source"] == "reported by the model"
            assert stage["cost"] == 0.0 and stage["cost_source"] == "local model (no charge)"
        # The answer prompt holds three chunks; the hypothesis prompt only the question.
        assert ans["input_tokens"] > 3 * hyp["input_tokens"]
        assert emb["input_tokens"] > 0 and meta["embedding_model"] == default_embedding_id()
        assert meta["input_tokens"] == hyp["input_tokens"] + ans["input_tokens"]
        assert meta["total_cost"] == 0.0
        assert meta["hypothesis_time"] > 0 and meta["answer_time"] > 0
    # LangChain's handler sees the same tokens, but lumped under one model name.
    (lumped,) = handler.usage_metadata.values()
    assert lumped["input_tokens"] == sum(r["metadata"]["input_tokens"] for r in out)


def test_ragas_evaluate_runs_offline_on_real_records(records):
    out, _ = records
    scores = score_records(out, ["string_similarity", "rouge", "chrf", "bleu"])
    assert len(scores) == 3
    for row in scores:
        assert all(value is not None and 0.0 <= value <= 1.0 for value in row.values()), row


def test_ragas_result_table_gets_each_real_records_tokens_cost_and_models(records):
    import warnings

    from ragas import EvaluationDataset, evaluate

    out, _ = records
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from ragas.metrics import NonLLMStringSimilarity

        result = evaluate(
            EvaluationDataset.from_list(out), metrics=[NonLLMStringSimilarity()],
            show_progress=False,
        )  # fmt: skip
    table = results_table(result, out)
    assert len(table) == 3 and table["non_llm_string_similarity"].between(0, 1).all()
    assert (table["answer_input_tokens"] > 0).all() and (table["total_cost"] == 0.0).all()
    assert table["answer_model_id"].str.contains(".gguf").all()
    assert list(table["input_tokens"]) == [r["metadata"]["input_tokens"] for r in out]


REFERENCE_SENTENCES = {
    "Who is credited with designing the Pharos of Alexandria?": (
        "Ancient writers credit its design to the architect Sostratus of Cnidus."
    ),
    "Which is the oldest surviving sea-washed lighthouse, and who built it?": (
        "In Scotland, the engineer Robert Stevenson built the Bell Rock Lighthouse on the "
        "Inchcape Rock, a reef off the coast of Angus near Arbroath that is covered by the "
        "sea for much of each day."
    ),
}
"""Sentences of the sample document (its Markdown text) that answer a sample question."""


def test_sentence_references_inside_retrieved_chunks_score_as_found(store_dir):
    pipeline = EvaluationPipeline.from_settings(
        store=open_store(store_dir), mode="standard", k=3, retrieval_only=True
    )
    records = [
        pipeline.run(question, reference_contexts=[sentence])
        for question, sentence in REFERENCE_SENTENCES.items()
    ]
    for record, sentence in zip(records, REFERENCE_SENTENCES.values(), strict=True):
        chunks = record["retrieved_contexts"]  # the PDF's text: ~1,000 characters each
        assert any(" ".join(sentence.split()) in " ".join(c.split()) for c in chunks), chunks
        assert min(len(c) for c in chunks) > 4 * len(sentence)
    scores = score_records(records)  # the default metrics
    context_recall = {
        name: [row[name] for row in scores]
        for name in scores[0]
        if name.endswith("context_recall") and not name.startswith("id_")
    }
    assert context_recall == {"contained_context_recall": [1.0, 1.0]}  # one pair, found
    assert all(row["contained_context_precision"] > 0.0 for row in scores)
    assert set(scores.chosen) == {"contained_context_precision", "contained_context_recall"}
    # Ragas' string metrics, still there by name, read the same retrieval as a failure.
    ragas = score_records(records, ["context_recall", "context_precision"])
    assert [row["context_recall"] for row in ragas] == [0.0, 0.0]


def test_a_real_judge_cut_at_its_token_cap_is_named_in_not_scored():
    record = {
        "user_input": "Who is credited with designing the Pharos of Alexandria?",
        "response": "Sostratus of Cnidus is credited with designing the Pharos.",
        "retrieved_contexts": list(REFERENCE_SENTENCES.values()),
    }
    judge = load_llm("local:smollm2-135m", role="answer", max_tokens=8)  # the engine is shared
    scores = score_records([record], ["faithfulness"], judge_llm=judge)
    assert scores[0]["faithfulness"] is None
    reason = scores.not_scored["faithfulness"]
    assert reason.startswith("the judge did not finish its output (LLMDidNotFinishException")
    assert "max_tokens" in reason


def _run(env, *args, **kwargs):
    return subprocess.run(
        [HYDE_LC, *args], env=env, capture_output=True, text=True, timeout=600, **kwargs
    )


def test_cli_evaluate_killed_mid_run_resumes_to_the_same_file(store_dir, tmp_path):
    env = {
        **os.environ,
        "HYDE_LC_STORE": str(store_dir),
        "HYDE_LC_ANSWER_LLM": "local:smollm2-135m",
        "HYDE_LC_THREADS": os.environ.get("HYDE_LC_THREADS", "1"),
    }
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        "".join(SAMPLE_QUESTIONS.read_text("utf-8").splitlines(keepends=True)[:4]), "utf-8"
    )
    # Standard mode: the answer model is greedy, so two runs give the same records.
    args = ("evaluate", str(questions), "--mode", "standard", "--k", "2")
    whole = tmp_path / "whole.jsonl"
    done = _run(env, *args, "--out", str(whole))
    assert done.returncode == 0, done.stderr
    assert len(read_records(whole)) == 4

    resumed = tmp_path / "resumed.jsonl"
    proc = subprocess.Popen(
        [HYDE_LC, *args, "--out", str(resumed)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if resumed.exists() and len(read_records(resumed)) >= 1:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = len(read_records(resumed))
    assert 1 <= kept < 4, "the run should have been killed part-way"

    again = _run(env, *args, "--out", str(resumed))
    assert again.returncode == 0, again.stderr
    assert f"{4 - kept} answered, {kept} already in" in again.stdout

    def strip(records):
        return [
            {**r, "metadata": {k: v for k, v in r["metadata"].items() if k not in TIMING_KEYS}}
            for r in records
        ]

    assert strip(read_records(resumed)) == strip(read_records(whole))

    scored = _run(env, *args, "--out", str(resumed), "--score", "--metrics", "rouge")
    assert scored.returncode == 0, scored.stderr
    assert '"rouge":' in scored.stdout and "0 answered, 4 already in" in scored.stdout


def test_cli_compare_writes_a_report(store_dir, tmp_path):
    env = {
        **os.environ,
        "HYDE_LC_STORE": str(store_dir),
        "HYDE_LC_HYPOTHESIS_LLM": "local:smollm2-135m",
        "HYDE_LC_ANSWER_LLM": "local:smollm2-135m",
        "HYDE_LC_THREADS": os.environ.get("HYDE_LC_THREADS", "1"),
    }
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        "".join(SAMPLE_QUESTIONS.read_text("utf-8").splitlines(keepends=True)[:2]), "utf-8"
    )
    report = tmp_path / "report"
    args = ("compare", str(questions), "--out-dir", str(report), "--k", "2", "--window", "1")
    done = _run(env, *args, "--metrics", "rouge", "chrf")
    assert done.returncode == 0, done.stderr
    assert "rouge" in done.stdout and str(report / "report.html") in done.stdout
    summary = json.loads((report / "summary.json").read_text("utf-8"))
    assert summary["modes"] == ["standard", "hyde", "hyde-window1"]
    for mode in summary["modes"]:
        agg = summary["aggregates"][mode]
        assert agg["questions"] == 2 and agg["failed"] == 0
        assert 0.0 <= agg["rouge"] <= 1.0 and agg["total_cost"] == 0.0
    assert summary["aggregates"]["standard"]["hypothesis_tokens_mean"] == 0
    assert summary["aggregates"]["hyde"]["hypothesis_tokens_mean"] > 0
    windowed = read_records(report / "hyde-window1.jsonl")
    assert windowed[0]["metadata"]["retrieval_method"] == "hybrid-hyde+window=1"
    for name in ("metrics.png", "latency.png", "tokens.png"):
        assert (report / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
