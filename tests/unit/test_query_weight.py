"""HyDERetriever(query_weight=...): the query's share of the mean and RRF fusions.

Dense fusion math: the retrievers here search with ``lexical="off"``.
"""

import numpy as np
import pytest

from hyde_lc.core.fusion import reciprocal_rank_fusion
from hyde_lc.errors import InvalidSettingError
from hyde_lc.retrievers.hyde import DEFAULT_QUERY_WEIGHT, HyDERetriever
from tests.fakes import TOPICS, ScriptedChat


def test_weighted_mean_gives_the_query_its_share(store, fake_embeddings):
    hyps = ["Fresnel lenses use prisms.", "Lenses focus the lamp."]
    retriever = HyDERetriever(
        vectorstore=store, hypothesis_llm=ScriptedChat(), n_hypotheses=2, query_weight=0.8
    )
    (vector,) = retriever.fuse(retriever.embed("Q?", hyps)).vectors
    q = np.asarray(fake_embeddings.embed_query("Q?"))
    h = np.asarray(fake_embeddings.embed_documents(hyps))
    assert vector == pytest.approx((0.8 * q + 0.1 * h[0] + 0.1 * h[1]).tolist())


def test_weighted_mean_ranks_as_interpolated_similarity_scores(store, fake_embeddings):
    # For unit vectors, ranking by the weighted mean vector is ranking by
    # w * cos(q, d) + (1 - w) * cos(h, d): the documented equivalence.
    retriever = HyDERetriever(
        vectorstore=store,
        hypothesis_llm=ScriptedChat(replies=[TOPICS[4]]),
        query_weight=0.7,
        k=8,
        lexical="off",
    )
    docs = retriever.invoke(TOPICS[0])
    q = np.asarray(fake_embeddings.embed_query(TOPICS[0]))
    h = np.asarray(fake_embeddings.embed_documents([TOPICS[4]])[0])
    d = np.asarray(fake_embeddings.embed_documents(TOPICS))
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    q, h = q / np.linalg.norm(q), h / np.linalg.norm(h)
    interpolated = 0.7 * d @ q + 0.3 * d @ h
    expected = [TOPICS[i] for i in np.argsort(-interpolated)]
    assert [doc.page_content for doc in docs] == expected


def test_weighted_rrf_weighs_the_query_ranking(store, fake_embeddings):
    hyps = TOPICS[4:6]
    retriever = HyDERetriever(
        vectorstore=store,
        hypothesis_llm=ScriptedChat(replies=hyps),
        fusion="rrf",
        n_hypotheses=2,
        k=4,
        rrf_candidates=5,
        query_weight=0.6,
        lexical="off",
    )
    docs = retriever.invoke(TOPICS[0])
    vectors = [fake_embeddings.embed_query(TOPICS[0]), *fake_embeddings.embed_documents(hyps)]
    rankings = [[d.id for d in store.similarity_search_by_vector(v, k=5)] for v in vectors]
    expected = reciprocal_rank_fusion(rankings, weights=[0.6, 0.2, 0.2])[:4]
    assert [d.id for d in docs] == [doc_id for doc_id, _ in expected]
    assert [d.metadata["score"] for d in docs] == pytest.approx([s for _, s in expected])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"query_weight": 0.0}, "strictly between 0 and 1"),
        ({"query_weight": 1.0}, "n_hypotheses=0"),
        ({"query_weight": 0.5, "fusion": "concat"}, "mean or rrf"),
        ({"query_weight": 0.5, "include_query": False}, "mean or rrf"),
    ],
)
def test_bad_query_weights_are_refused_with_the_fix(store, options, message):
    with pytest.raises(InvalidSettingError, match=message):
        HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), **options)


def test_default_weight_is_0_8_and_applies_only_where_the_query_is_fused(store, fake_embeddings):
    hyps = ["Fresnel lenses use prisms."]
    retriever = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat())
    assert retriever.query_weight == DEFAULT_QUERY_WEIGHT == 0.8
    (vector,) = retriever.fuse(retriever.embed("Q?", hyps)).vectors
    q = np.asarray(fake_embeddings.embed_query("Q?"))
    h = np.asarray(fake_embeddings.embed_documents(hyps)[0])
    assert vector == pytest.approx((0.8 * q + 0.2 * h).tolist())
    # concat and hypotheses-only have no query share: the default steps aside there
    for options in ({"fusion": "concat"}, {"include_query": False}):
        other = HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), **options)
        assert other.query_weight is None


def test_the_label_names_the_paper_weighting_apart_from_the_default(store):
    def label(**options):
        return HyDERetriever(vectorstore=store, hypothesis_llm=ScriptedChat(), **options).label

    assert label() == "hybrid-hyde"
    assert label(query_weight=DEFAULT_QUERY_WEIGHT) == "hybrid-hyde"
    assert label(query_weight=None) == "hybrid-hyde(w=paper)"
    assert label(query_weight=0.6) == "hybrid-hyde(w=0.6)"
    assert label(fusion="concat") == "hybrid-hyde(fusion=concat)"  # no query share to name
