"""The dynamically quantised MiniLM graph: conversion, digest check, cache and re-check.

A tiny graph of the shipped kind (an int8 weight cast to float and scaled before a
``MatMul``, an int8 table scaled before a ``Gather``) stands in for the 23 MB model:
the conversion runs with the real onnx and onnxruntime tools in milliseconds.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import hyde_lc.models.minilm_quantized as mq  # noqa: E402
from hyde_lc.errors import ModelFileError  # noqa: E402
from hyde_lc.models.minilm_quantized import (  # noqa: E402
    MADE_WITH,
    DynamicGraph,
    QuantizedGraphError,
    dequantize_matmul_weights,
    make_dynamic_graph,
)

RNG = np.random.default_rng(0)
Q = RNG.integers(-127, 128, size=(16, 8)).astype(np.int8)
Q[0] = 127  # symmetric per-column quantisation, as shipped: each column reaches 127
SCALE = (RNG.random((1, 8)).astype(np.float32) + 0.5) / 127
TABLE_Q = RNG.integers(-127, 128, size=(10, 16)).astype(np.int8)
TABLE_SCALE = np.full((10, 1), 0.01, dtype=np.float32)


def shipped_kind(path: Path) -> Path:
    """ids -> Gather(table) -> MatMul(weight): both weights stored as int8 + scale."""
    nodes = [
        helper.make_node("Cast", ["table_q"], ["table_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["table_f", "table_scale"], ["table"]),
        helper.make_node("Gather", ["table", "ids"], ["hidden"]),
        helper.make_node("Cast", ["w_q"], ["w_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["w_f", "w_scale"], ["w"]),
        helper.make_node("MatMul", ["hidden", "w"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 8])],
        [
            numpy_helper.from_array(TABLE_Q, "table_q"),
            numpy_helper.from_array(TABLE_SCALE, "table_scale"),
            numpy_helper.from_array(Q, "w_q"),
            numpy_helper.from_array(SCALE, "w_scale"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def run(model_bytes: bytes, ids: list[int]) -> np.ndarray:
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return session.run(["out"], {"ids": np.array(ids, dtype=np.int64)})[0]


@pytest.fixture
def shipped(tmp_path) -> Path:
    return shipped_kind(tmp_path / "shipped.onnx")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HYDE_LC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_matmul_weights_are_dequantised_exactly_and_tables_left_as_shipped(shipped):
    model = onnx.load(str(shipped))
    assert dequantize_matmul_weights(model) == 1
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert np.array_equal(weights["w"], Q.astype(np.float32) * SCALE)
    assert "w_q" not in weights and "table_q" in weights  # the Gather table stays int8
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Cast") == 1 and ops.count("MatMul") == 1
    ids = [1, 4, 9]
    assert np.array_equal(
        run(model.SerializeToString(), ids), run(shipped.read_bytes(), ids)
    )  # bit for bit what the shipped graph computes


def test_the_graph_computes_in_int8_and_is_made_the_same_each_time(shipped):
    first, second = make_dynamic_graph(shipped), make_dynamic_graph(shipped)
    assert first == second
    model = onnx.load_from_string(first)
    ops = {n.op_type for n in model.graph.node}
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= ops and "MatMul" not in ops
    assert (model.producer_name, model.producer_version) == ("hyde_lc", "")
    # Per column, symmetric: the int8 weight comes back as shipped.
    quantized = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert np.array_equal(quantized["w_quantized"], Q)
    ids = [0, 3, 7]
    exact, approx = run(shipped.read_bytes(), ids), run(first, ids)
    norms = np.linalg.norm(exact, axis=1) * np.linalg.norm(approx, axis=1)
    cosine = (exact * approx).sum(1) / norms
    assert cosine.min() > 0.99


def test_quantising_leaves_the_applications_root_logger_alone(shipped):
    root = logging.getLogger()
    handlers, filters = list(root.handlers), list(root.filters)
    make_dynamic_graph(shipped)
    assert root.handlers == handlers and root.filters == filters


def test_a_graph_without_int8_matmul_weights_is_refused(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["out"])],
        "float",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(np.eye(2, dtype=np.float32), "w")],
    )
    path = tmp_path / "float.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(ModelFileError, match=r"no int8 MatMul weight.*--force-reinstall"):
        make_dynamic_graph(path)


def graph_of(shipped: Path, sha256: str, made: list[Path]) -> DynamicGraph:
    def make(source: Path) -> bytes:
        made.append(source)
        return make_dynamic_graph(source)

    return DynamicGraph("tiny-dq", "tiny-dq.onnx", sha256, lambda: shipped, make)


def test_the_graph_is_made_once_then_read_from_the_cache(shipped, cache):
    made: list[Path] = []
    digest = hashlib.sha256(make_dynamic_graph(shipped)).hexdigest()
    graph = graph_of(shipped, digest, made)
    path = graph.path()
    assert path == cache / "models" / "tiny-dq.onnx"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert graph.path() == path and made == [shipped]  # the second call reads the cache
    assert [p.name for p in path.parent.iterdir()] == ["tiny-dq.onnx"]  # no temp file left


def test_a_cached_graph_changed_on_disk_is_refused_then_made_again_once_deleted(shipped, cache):
    made: list[Path] = []
    graph = graph_of(shipped, hashlib.sha256(make_dynamic_graph(shipped)).hexdigest(), made)
    path = graph.path()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size, other content
    path.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match=r"fails its checksum.*Delete it \(rm "):
        graph.path()
    path.unlink()
    assert graph.path() == path and len(made) == 2


def test_other_tool_versions_that_make_another_graph_are_refused(shipped, cache, monkeypatch):
    monkeypatch.setattr(mq, "installed_versions", lambda: {"onnx": "9.9", "onnxruntime": "8.8"})
    graph = graph_of(shipped, "0" * 64, [])
    with pytest.raises(QuantizedGraphError) as caught:
        graph.path()
    message = str(caught.value)
    assert "onnx 9.9, onnxruntime 8.8" in message  # what made it here
    for name, version in MADE_WITH.items():
        assert f"{name}=={version}" in message  # what fixes it
    assert "local:minilm, the shipped graph" in message
    models = cache / "models"
    assert not models.exists() or list(models.iterdir()) == []  # nothing unverified is kept


@pytest.fixture
def int8_cpu(monkeypatch) -> None:
    """A CPU with int8 dot-product instructions, whatever this machine has."""
    monkeypatch.setattr(mq, "cpu_adds_int8_products_exactly", lambda: True)


@pytest.fixture
def unmakeable(monkeypatch, int8_cpu) -> None:
    """Tools that make another graph than the verified one (as other versions may)."""
    monkeypatch.delenv("HYDE_LC_EMBEDDINGS", raising=False)

    def refuse(**overrides):
        raise QuantizedGraphError("the minilm-dq graph made here differs (onnx 9.9)")

    monkeypatch.setattr(mq, "load_minilm_dynamic", refuse)


def test_the_default_falls_back_to_the_shipped_graph_under_its_own_id(unmakeable, caplog):
    from hyde_lc.models.loading import embedding_model_id, load_embeddings

    with caplog.at_level(logging.WARNING, logger="hyde_lc.models.loading"):
        embeddings = load_embeddings()
    assert embedding_model_id(embeddings) == "local:minilm"  # recorded as what it is
    (record,) = caplog.records
    assert "differs (onnx 9.9)" in record.getMessage()
    assert "Using local:minilm (the shipped graph)" in record.getMessage()


@pytest.mark.parametrize("chosen", ["argument", "environment"])
def test_a_chosen_minilm_dq_is_never_replaced(unmakeable, monkeypatch, chosen):
    from hyde_lc.models.loading import load_embeddings

    if chosen == "environment":
        monkeypatch.setenv("HYDE_LC_EMBEDDINGS", "local:minilm-dq")
    with pytest.raises(QuantizedGraphError, match="differs"):
        load_embeddings("local:minilm-dq" if chosen == "argument" else None)


def test_the_default_is_the_quantised_graph_when_it_can_be_made(monkeypatch, int8_cpu):
    from hyde_lc.models.loading import DEFAULT_EMBEDDINGS, embedding_model_id, load_embeddings

    monkeypatch.delenv("HYDE_LC_EMBEDDINGS", raising=False)
    made = mq.MiniLMDynamicEmbeddings()
    monkeypatch.setattr(mq, "load_minilm_dynamic", lambda **overrides: made)
    assert DEFAULT_EMBEDDINGS == "local:minilm-dq"
    assert embedding_model_id(load_embeddings()) == "local:minilm-dq"


@pytest.mark.parametrize(
    ("machine", "flags", "exact"),
    [
        ("x86_64", "fpu sse2 avx2 avx512bw avx512_vnni", True),
        ("x86_64", "fpu sse2 avx2 avx_vnni", True),
        ("AMD64", "fpu sse2 avx2 avx512bw", False),  # VPMADDUBSW: 16-bit pair sums
        ("x86_64", None, False),  # no /proc/cpuinfo to read (macOS, Windows)
        ("aarch64", None, True),
        ("arm64", None, True),
        ("ppc64le", "fpu", False),
    ],
)
def test_which_cpus_add_int8_products_exactly(tmp_path, machine, flags, exact):
    cpuinfo = tmp_path / "cpuinfo"
    if flags is not None:
        cpuinfo.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n")
    assert mq.cpu_adds_int8_products_exactly(machine=machine, cpuinfo=cpuinfo) is exact


def test_without_int8_dot_products_the_default_is_the_shipped_graph(monkeypatch, caplog):
    from hyde_lc.models.loading import embedding_model_id, load_embeddings

    monkeypatch.delenv("HYDE_LC_EMBEDDINGS", raising=False)
    monkeypatch.setattr(mq, "cpu_adds_int8_products_exactly", lambda: False)
    made = mq.MiniLMDynamicEmbeddings()
    monkeypatch.setattr(mq, "load_minilm_dynamic", lambda **overrides: made)
    with caplog.at_level(logging.INFO, logger="hyde_lc.models.loading"):
        embeddings = load_embeddings()
    assert embedding_model_id(embeddings) == "local:minilm"  # though the graph could be made
    (record,) = caplog.records
    assert record.levelno == logging.INFO  # a machine fact, not a fault
    assert "HYDE_LC_EMBEDDINGS=local:minilm-dq" in record.getMessage()
    # chosen by name (argument or environment), it is used all the same
    assert embedding_model_id(load_embeddings("local:minilm-dq")) == "local:minilm-dq"
    monkeypatch.setenv("HYDE_LC_EMBEDDINGS", "local:minilm-dq")
    assert embedding_model_id(load_embeddings()) == "local:minilm-dq"


def test_without_onnxruntime_the_default_is_refused_naming_the_extra(monkeypatch):
    import importlib.util

    from hyde_lc.errors import MissingDependencyError
    from hyde_lc.models.loading import load_embeddings

    monkeypatch.delenv("HYDE_LC_EMBEDDINGS", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "onnxruntime" else real(name, *a),
    )
    with pytest.raises(MissingDependencyError, match=r"hyde-lc\[local\]"):
        load_embeddings()  # no fallback: the shipped graph could not run either


def test_usage_reports_it_as_the_local_minilm_at_no_charge():
    from hyde_lc.evaluation.usage import describe_embeddings

    info = describe_embeddings(mq.MiniLMDynamicEmbeddings())
    assert (info.provider, info.name, info.model_id) == (
        "local",
        "all-MiniLM-L6-v2",
        "local:minilm-dq",
    )
