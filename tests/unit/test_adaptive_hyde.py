"""Adaptive HyDE: ``min_hypothesis_similarity`` leaves off-topic hypotheses out of the fusion."""

import numpy as np
import pytest

from hyde_lc.core.fusion import similar_enough
from hyde_lc.errors import InvalidSettingError
from hyde_lc.retrievers.hyde import HyDERetriever
from tests.fakes import TOPICS, ScriptedChat

QUERY = TOPICS[0]


def test_similar_enough_keeps_hypotheses_at_or_above_the_threshold():
    query = [1.0, 0.0]
    hypotheses = [[2.0, 0.0], [1.0, 1.0], [0.0, 1.0], [-1.0, 0.0]]  # cos 1, 0.71, 0, -1
    assert similar_enough(query, hypotheses, 0.7) == [0, 1]
    assert similar_enough(query, hypotheses, 0.0) == [0, 1, 2]
    assert similar_enough(query, [], 0.5) == []


def gated(store, replies, gate, **options):
    settings = {"k": 3, **options}
    return HyDERetriever(
        vectorstore=store,
        hypothesis_llm=ScriptedChat(replies=replies),
        n_hypotheses=len(replies),
        min_hypothesis_similarity=gate,
        **settings,
    )


def test_an_off_topic_hypothesis_is_left_out_of_the_mean(store, fake_embeddings):
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
async def test_when_every_hypothesis_is_dropped_the_query_alone_is_searched(store, fusion):
    retriever = gated(store, [TOPICS[5], TOPICS[6]], 0.9, fusion=fusion, lexical="off")
    standard = HyDERetriever(vectorstore=store, n_hypotheses=0, k=3, lexical="off")
    for docs in (retriever.invoke(QUERY), await retriever.ainvoke(QUERY)):
        assert [d.id for d in docs] == [d.id for d in standard.invoke(QUERY)]
        assert "min_hypothesis_similarity=0.9" in docs[0].metadata["hyde_fallback"]
        assert docs[0].metadata["hyde_hypotheses_dropped"] == 2


async def test_dropped_hypotheses_stay_out_of_the_lexical_query_too(store):
    # Off-topic passages full of other words must not steer BM25 either: with every
    # hypothesis dropped, hybrid HyDE ranks as hybrid search with the question alone.
    retriever = gated(store, [TOPICS[5], TOPICS[6]], 0.9, k=len(TOPICS))
    hybrid = HyDERetriever(vectorstore=store, n_hypotheses=0, k=len(TOPICS))
    expected = [(d.id, d.metadata["lexical_score"]) for d in hybrid.invoke(QUERY)]
    for docs in (retriever.invoke(QUERY), await retriever.ainvoke(QUERY)):
        assert [(d.id, d.metadata["lexical_score"]) for d in docs] == expected
        assert "min_hypothesis_similarity=0.9" in docs[0].metadata["hyde_fallback"]
    # One kept, one dropped: the kept passage's words count, the dropped one's do not.
    partly = gated(store, [QUERY, TOPICS[5]], 0.9, k=len(TOPICS)).invoke(QUERY)
    volcano = next(d for d in partly if d.page_content == TOPICS[5])
    assert volcano.metadata["lexical_score"] is None  # found by the dense side only


def test_gate_without_the_query_in_the_fusion_still_compares_with_the_query(store):
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
def test_bad_gates_are_refused_with_the_fix(store, options, message):
    with pytest.raises(InvalidSettingError, match=message):
        HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), **options)
