"""Adaptive HyDE: ``min_hypothesis_similarity`` leaves off-topic hypotheses out of the fusion."""

import numpy as np
import pytest
from pydantic import ValidationError

from hyde_lc.bench.retrieval import default_modes
from hyde_lc.fusion import similar_enough
from hyde_lc.retriever import HyDERetriever
from tests.unit.test_retriever import TOPICS, ScriptedChat, store  # noqa: F401  (fixture)

QUERY = TOPICS[0]


def test_similar_enough_keeps_hypotheses_at_or_above_the_threshold():
    query = [1.0, 0.0]
    hypotheses = [[2.0, 0.0], [1.0, 1.0], [0.0, 1.0], [-1.0, 0.0]]  # cos 1, 0.71, 0, -1
    assert similar_enough(query, hypotheses, 0.7) == [0, 1]
    assert similar_enough(query, hypotheses, 0.0) == [0, 1, 2]
    assert similar_enough(query, [], 0.5) == []


def gated(store, replies, gate, **options):  # noqa: F811
    return HyDERetriever(
        vectorstore=store,
        hypothesis_llm=ScriptedChat(replies=replies),
        n_hypotheses=len(replies),
        min_hypothesis_similarity=gate,
        k=3,
        **options,
    )


def test_an_off_topic_hypothesis_is_left_out_of_the_mean(store, fake_embeddings):  # noqa: F811
    # The fake embeddings hash texts: a hypothesis equal to the query has cosine 1 with
    # it, an unrelated one a cosine near 0.
    cos = similar_enough(
        fake_embeddings.embed_query(QUERY), fake_embeddings.embed_documents([TOPICS[5]]), 0.9
    )
    assert cos == []  # the premise: TOPICS[5] is far from the query
    retriever = gated(store, [QUERY, TOPICS[5]], 0.9)
    result = retriever.retrieve_with_details(QUERY)
    (vector,) = result.search_vectors
    q = np.asarray(fake_embeddings.embed_query(QUERY))
    assert vector == pytest.approx(q.tolist())  # mean of query and the kept copy of it
    assert result.hypotheses_dropped == 1 and result.fallback is None
    assert all(d.metadata["hyde_hypotheses_dropped"] == 1 for d in result.documents)

    ungated = gated(store, [QUERY, TOPICS[5]], None).retrieve_with_details(QUERY)
    assert ungated.search_vectors[0] != pytest.approx(q.tolist())
    assert "hyde_hypotheses_dropped" not in ungated.documents[0].metadata


@pytest.mark.parametrize("fusion", ["mean", "rrf"])
async def test_when_every_hypothesis_is_dropped_the_query_alone_is_searched(store, fusion):  # noqa: F811
    retriever = gated(store, [TOPICS[5], TOPICS[6]], 0.9, fusion=fusion)
    standard = HyDERetriever(vectorstore=store, n_hypotheses=0, k=3)
    for docs in (retriever.invoke(QUERY), await retriever.ainvoke(QUERY)):
        assert [d.id for d in docs] == [d.id for d in standard.invoke(QUERY)]
        assert "min_hypothesis_similarity=0.9" in docs[0].metadata["hyde_fallback"]
        assert docs[0].metadata["hyde_hypotheses_dropped"] == 2


def test_gate_without_the_query_in_the_fusion_still_compares_with_the_query(store):  # noqa: F811
    retriever = gated(store, [QUERY, TOPICS[5]], 0.9, include_query=False)
    result = retriever.retrieve_with_details(QUERY)
    assert result.hypotheses_dropped == 1 and result.documents[0].page_content == QUERY


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_hypothesis_similarity": 1.5}, "between -1 and 1"),
        ({"min_hypothesis_similarity": 0.5, "fusion": "concat"}, "fusion='mean' or 'rrf'"),
    ],
)
def test_bad_gates_are_refused_with_the_fix(store, options, message):  # noqa: F811
    with pytest.raises(ValidationError, match=message):
        HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), **options)


def test_bench_gate_modes_are_named_and_filtered_by_kind():
    modes = default_modes([1], ["generic"], query_weights=[0.8], gates=[0.5])
    gated_names = [m.name for m in modes if m.min_similarity is not None]
    assert gated_names == ["mean+q gate=0.5 n=1 generic", "mean+q w=0.8 gate=0.5 n=1 generic"]
    assert {m.kind for m in modes} == {"standard", "mean+q", "mean (hyp only)", "concat", "rrf"}
