import hyde_lc

EXPECTED = [
    "PROMPTS",
    "HyDEResult",
    "HyDERetriever",
    "HydeLcError",
    "IngestReport",
    "NeighborExpandingRetriever",
    "build_answer_chain",
    "collection_info",
    "ingest_paths",
    "load_embeddings",
    "load_llm",
    "open_store",
]


def test_public_api_is_pinned():
    assert sorted(hyde_lc.__all__) == sorted(EXPECTED)
    for name in EXPECTED:
        assert getattr(hyde_lc, name) is not None


def test_every_public_class_has_a_docstring_with_an_example():
    for name in EXPECTED:
        obj = getattr(hyde_lc, name)
        if isinstance(obj, type) and name not in {"HyDEResult", "IngestReport", "HydeLcError"}:
            assert "Example" in (obj.__doc__ or ""), name
