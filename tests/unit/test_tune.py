"""hyde-lc tune: the recommendation rule on fixed scores, and a run over a real collection
of fake embeddings with a test set a fake writer made."""

from __future__ import annotations

import pytest

from hyde_lc.bench.retrieval import per_query_measures
from hyde_lc.bench.tune import (
    REFERENCE,
    TUNE_CONFIGS,
    by_name,
    lexical_lead,
    recommend,
    tune,
    window_holds,
    write_tune_report,
)
from hyde_lc.cli.testset import TUNE_NAMES
from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation.testset import ChunkSource, make_testset, read_testset
from hyde_lc.ingest.files import ingest_paths
from tests.fakes import ScriptedChat

COSTS = {
    "dense": (0, 2.0),
    "bm25": (0, 1.0),
    "hybrid": (0, 3.0),
    "hybrid-hyde": (1, 5.0),
    "dense-hyde": (1, 5.0),
}


def scores(**means: list[float]) -> dict[str, dict[str, float]]:
    """Configuration -> question -> score, from per-question lists."""
    return {name.replace("_", "-"): dict(enumerate(values)) for name, values in means.items()}


def flat(value: float, n: int = 40) -> list[float]:
    return [value] * n


def noisy(value: float, n: int = 40) -> list[float]:
    """Mean ``value``, spread +-0.3 around it (so small differences are not significant)."""
    return [value + (0.3 if i % 2 else -0.3) for i in range(n)]


def jitter(values: list[float]) -> list[float]:
    """``values`` moved +0.1 / -0.08 in turn: a mean gain of 0.01, well inside the noise."""
    return [v + (0.1 if i % 2 else -0.08) for i, v in enumerate(values)]


def test_the_cheapest_wins_when_nothing_beats_it():
    s = scores(dense=jitter(noisy(0.5)), bm25=noisy(0.5), hybrid=jitter(jitter(noisy(0.5))))
    choice = recommend(s, COSTS, resamples=500)
    assert choice.name == "bm25" and not choice.beaten
    assert choice.candidates == ["bm25", "dense", "hybrid"]


def test_a_dearer_configuration_wins_when_it_beats_every_cheaper_one():
    s = scores(dense=flat(0.3), bm25=flat(0.4), hybrid=flat(0.5), hybrid_hyde=flat(0.6))
    choice = recommend(s, COSTS, resamples=500)
    assert choice.name == "hybrid-hyde"
    assert set(choice.beaten) == {"dense", "bm25", "hybrid"}
    assert "every cheaper one is beaten" in choice.reason()


def test_a_gain_inside_the_noise_does_not_buy_the_llm():
    # HyDE is better on average, but its interval against hybrid includes 0.
    s = scores(hybrid=noisy(0.5), hybrid_hyde=jitter(noisy(0.5)))
    assert recommend(s, COSTS, resamples=500).name == "hybrid"


def test_milliseconds_apart_is_a_tie_and_the_current_default_goes_first():
    s = scores(bm25=flat(0.5), dense=flat(0.5), hybrid=flat(0.5))
    same = {"bm25": (0, 0.04), "dense": (0, 0.03), "hybrid": (0, 0.06)}
    assert recommend(s, same, resamples=100).name == REFERENCE
    assert recommend(scores(bm25=flat(0.5), dense=flat(0.5)), same, resamples=100).name == "bm25"


def test_a_configuration_beaten_by_a_dearer_one_is_passed_over_for_the_next():
    s = scores(bm25=flat(0.3), hybrid=flat(0.5), hybrid_hyde=flat(0.5))
    choice = recommend(s, COSTS, resamples=100)
    assert choice.name == "hybrid" and choice.beaten == {"bm25": "hybrid"}


def test_hit_mrr_and_ndcg_by_chunk_id():
    qrels = {"q1": {"c": 1}, "q2": {"c": 1}}
    runs = {"q1": [("c", 3.0), ("x", 2.0)], "q2": [("x", 3.0), ("y", 2.0), ("c", 1.0)]}
    got = per_query_measures(qrels, runs, ["Success@1", "Success@5", "RR@10"])
    assert got == {
        "Success@1": {"q1": 1.0, "q2": 0.0},
        "Success@5": {"q1": 1.0, "q2": 1.0},
        "RR@10": {"q1": 1.0, "q2": pytest.approx(1 / 3)},
    }


def test_every_configuration_says_how_to_select_it():
    assert [c.name for c in TUNE_CONFIGS] == list(TUNE_NAMES)
    assert by_name("hybrid").mode.is_default
    assert by_name("dense").flags == "--mode standard --lexical off"
    with pytest.raises(HydeLcError, match="unknown configuration"):
        by_name("colbert")


def test_a_window_holds_the_reference_when_it_covers_its_position():
    from langchain_core.documents import Document

    window = Document("...", metadata={"doc_id": "d", "window_start": 3, "window_end": 5})
    assert window_holds(window, "d", 4) and not window_holds(window, "d", 6)
    assert not window_holds(window, "e", 4)
    assert window_holds(Document("x", metadata={"doc_id": "d", "chunk_index": 2}), "d", 2)


def test_bm25s_lead_is_split_by_how_much_each_question_copies():
    # BM25 wins only the questions that copy most of their chunk's words.
    overlap = {f"q{i}": i / 10 for i in range(8)}
    bm25 = {f"q{i}": 1.0 for i in range(8)}
    dense = {f"q{i}": 1.0 if i < 4 else 0.5 for i in range(8)}
    lead = lexical_lead(bm25, dense, overlap)
    assert lead is not None
    assert lead.overall == pytest.approx(25.0)
    assert lead.low == (4, pytest.approx(0.15), pytest.approx(0.0))
    assert lead.high == (4, pytest.approx(0.55), pytest.approx(50.0))
    assert "nearer the lower figure" in lead.sentence()
    assert lead.to_json()["high_overlap_half"]["bm25_lead_points"] == pytest.approx(50.0)


def test_an_even_lead_is_not_blamed_on_the_set():
    overlap = {f"q{i}": i / 10 for i in range(8)}
    lead = lexical_lead({k: 1.0 for k in overlap}, {k: 0.9 for k in overlap}, overlap)
    assert lead is not None and lead.low[2] == pytest.approx(lead.high[2])
    assert "nearer the lower figure" not in lead.sentence()


def test_no_lead_without_enough_questions_that_carry_an_overlap():
    assert lexical_lead({"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 1.0}, {"a": 0.1, "b": 0.9}) is None
    questions = {f"q{i}": 1.0 for i in range(8)}
    assert lexical_lead(questions, questions, {}) is None  # hand-written questions: no overlap


# -- over a collection --------------------------------------------------------------------

REPLIES = [
    "Question: Which device turns a lamp's light into a beam with rings of glass prisms?\n"
    "Answer: Lighthouse lenses",
    "Question: What did keepers do with the wicks and the clockwork each night?\n"
    "Answer: Keepers trimmed wicks and wound the clockwork",
    "Question: Which insects make honey in hives?\nAnswer: Bees",
    "Question: What makes sourdough bread rise?\nAnswer: wild yeast and bacteria",
]


class Matching(ScriptedChat):
    """Replies with the line of ``REPLIES`` whose answer is in the chunk it is shown."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        prompt = messages[-1].content.lower()
        self.log.append(prompt)
        for reply in self.replies:
            if reply.split("Answer: ")[1].lower() in prompt:
                return self._result(reply)
        return self._result("Question: ?\nAnswer: ?")


@pytest.fixture
def made(store, tmp_path):
    """A four-question test set over the unit store (one chunk per topic file)."""
    out = tmp_path / "set.jsonl"
    summary = make_testset(
        ChunkSource.of_store(store),
        out,
        n=4,
        writer=Matching(replies=REPLIES),
        progress=False,
        min_chunk_terms=3,
        rephraser=None,
    )
    assert summary.kept == 4
    return out


def test_tune_reports_every_configuration_with_intervals_costs_and_a_choice(store, made):
    hypotheses = ScriptedChat(replies=["A passage about lighthouse keepers and lenses."])
    report = tune(made, store, llm=hypotheses, resamples=200)
    assert [r.config.name for r in report.rows] == list(TUNE_NAMES)
    default = report.row("hybrid")
    assert default.vs_default == {}
    for row in report.rows:
        assert set(row.scores) == {"Success@1", "Success@5", "RR@10", "nDCG@10"}
        assert row.seconds >= 0
        if row is not default:
            low, high = row.vs_default["nDCG@10"]["ci"]
            assert low <= row.vs_default["nDCG@10"]["delta"] <= high
    assert report.row("hybrid-hyde").config.llm_calls == 1
    assert report.row("bm25").mean("Success@5") > 0  # the reference chunks are found by id
    assert len(hypotheses.log) == len(read_testset(made))  # written once, shared, reused
    assert report.recommendation.name in TUNE_NAMES
    text = report.choice()
    assert "Python: " in text and "hyde-lc: " in text
    assert [w.window for w in report.windows] == [0, 1, 2]
    chosen = report.chosen_retriever(store, llm=hypotheses)
    assert chosen.invoke(read_testset(made)[0].question)  # the choice, ready to use
    assert report.lead is not None  # the set's questions carry their overlap
    assert report.lead.low[0] + report.lead.high[0] == len(read_testset(made))
    assert "BM25's lead over dense" in report.markdown()
    assert report.to_json()["lexical_lead"]["bm25_lead_points"] == pytest.approx(
        report.lead.overall
    )


def test_tune_writes_its_report(store, made, tmp_path):
    report = tune(made, store, configs=[by_name("dense"), by_name("hybrid")], windows=())
    paths = write_tune_report(report, tmp_path / "report")
    assert all(p.is_file() for p in paths.values())
    assert "**" in paths["markdown"].read_text()  # the recommended row stands out


def test_tune_refuses_a_changed_collection_naming_what_is_gone(store, made, tmp_path):
    questions = read_testset(made)
    gone_source = questions[0].extra["source"]
    store.delete(where={"source": gone_source})
    cheap = [by_name("dense"), by_name("bm25"), by_name("hybrid")]
    with pytest.raises(HydeLcError, match=r"1 of \d+ questions lost a reference .*1 gone"):
        tune(made, store, configs=cheap, windows=())
    report = tune(made, store, configs=cheap, windows=(), allow_changed=True)
    assert report.meta["questions"] == len(questions) - 1
    assert "1 gone" in report.meta["collection_note"]


def test_tune_goes_on_when_the_collection_only_grew(store, made, tmp_path):
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "extra.txt").write_text("Tides rise and fall twice a day under the moon's pull.")
    ingest_paths([folder], store, progress=False)
    cheap = [by_name("dense"), by_name("hybrid")]
    with pytest.raises(HydeLcError, match="references are still there"):
        tune(made, store, configs=cheap, windows=())
    assert tune(made, store, configs=cheap, windows=(), allow_changed=True).meta["questions"] == (
        len(read_testset(made))
    )


def test_the_examples_in_the_docstrings_hold():
    import doctest

    from hyde_lc.bench import tune as module

    assert doctest.testmod(module).failed == 0
