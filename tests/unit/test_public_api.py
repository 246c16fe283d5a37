import importlib
import subprocess
import sys

import pytest

import hyde_lc

EXPECTED = [
    "PROMPTS",
    "HyDEEmbeddings",
    "HyDEResult",
    "HyDERetriever",
    "HydeLcError",
    "HypothesisCache",
    "IngestReport",
    "InputLimits",
    "InvalidSettingError",
    "LexicalSearch",
    "NeighborExpandingRetriever",
    "build_answer_chain",
    "collection_info",
    "ingest_documents",
    "ingest_paths",
    "load_embeddings",
    "load_llm",
    "open_store",
    "refresh_store",
    "sample_files",
]


def test_public_api_is_pinned():
    assert sorted(hyde_lc.__all__) == sorted(EXPECTED)
    for name in EXPECTED:
        assert getattr(hyde_lc, name) is not None


def test_each_public_name_is_the_object_its_module_defines():
    for name in EXPECTED:
        module = importlib.import_module(hyde_lc._EXPORTS[name])
        assert getattr(hyde_lc, name) is getattr(module, name), name


def test_star_import_and_dir_list_the_public_names():
    namespace: dict = {}
    exec("from hyde_lc import *", namespace)
    assert set(EXPECTED) <= set(namespace)
    assert set(EXPECTED) <= set(dir(hyde_lc))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'HydeRetriever'"):
        hyde_lc.HydeRetriever  # noqa: B018


def test_every_public_class_has_a_docstring_with_an_example():
    for name in EXPECTED:
        obj = getattr(hyde_lc, name)
        if isinstance(obj, type) and name not in {"HyDEResult", "IngestReport", "HydeLcError"}:
            assert "Example" in (obj.__doc__ or ""), name


def test_the_readme_and_notebook_imports_resolve_in_a_fresh_interpreter():
    """What the README and the notebooks import, in a process that imported nothing else."""
    code = (
        "from hyde_lc import HyDERetriever, build_answer_chain, ingest_paths, load_llm, "
        "open_store, sample_files, NeighborExpandingRetriever; "
        "print(sample_files()[0].name)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.strip() == "lighthouses.pdf"
