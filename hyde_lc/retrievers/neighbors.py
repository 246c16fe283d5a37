"""`NeighborExpandingRetriever`: widen each hit with its neighbouring chunks.

A chunk often lacks the sentences around the answer. This retriever asks any base
retriever (`HyDERetriever`, a plain store retriever) for hits, then turns each hit into a
*window*: the hit plus ``before`` chunks before it and ``after`` after it, from the same
document only. It knows a chunk's neighbours from chunks ingested by hyde_lc (read by id
from Chroma or any LangChain store that reads by id), and from chunks made by LangChain's
splitters with ``add_start_index=True`` (listed from Chroma, ``InMemoryVectorStore`` or
FAISS); see `NeighborExpandingRetriever` for the contract. The pipeline::

    base hits (ranked) --> windows per hit, clipped to the document
      --> windows that overlap or touch in a document are merged (best score kept)
      --> the first k windows --> one Chroma query fetches every chunk they cover
      --> each window's chunks joined, overlap removed, as one Document

Windows never share text, so nothing appears twice; the base is asked for more hits than
``k`` so that merging still leaves ``k`` windows when the collection has them. One limit,
by design: hits ranked above the k-th window are never dropped, so when the top hits are
successive neighbours their windows chain into fewer, larger ones (in a short document, up
to the whole document). ``max_chars`` bounds a window's size.

Example:
    >>> from hyde_lc import NeighborExpandingRetriever, open_store
    >>> store = open_store()  # doctest: +SKIP
    >>> retriever = NeighborExpandingRetriever(
    ...     base_retriever=store.as_retriever(), vectorstore=store, k=3, window=1
    ... )  # doctest: +SKIP
    >>> docs = retriever.invoke("How were lighthouse lamps fuelled?")  # doctest: +SKIP
    >>> docs[0].metadata["window_start"], docs[0].metadata["window_end"]  # doctest: +SKIP
    (11, 13)

"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar, Literal

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.vectorstores import VectorStore
from pydantic import PrivateAttr, field_validator, model_validator

from hyde_lc.core.chunks import chunk_id
from hyde_lc.core.language import is_cjk
from hyde_lc.errors import InvalidSettingError, NotPortableError
from hyde_lc.retrievers.base import (
    PART_TIMINGS,
    DetailedRetriever,
    HyDEResult,
    Plan,
    Step,
    TopK,
    retrieved,
    valid_k,
)
from hyde_lc.retrievers.config import check_config, load_store_config, neighbors_config
from hyde_lc.retrievers.hyde import HyDERetriever
from hyde_lc.search.backend import SearchBackend, backend_for

logger = logging.getLogger(__name__)

REQUIRED_METADATA = ("source", "chunk_index", "start_index")


@dataclass
class Window:
    """A run of consecutive chunks ``[start, end]`` of one document, with its hits."""

    source: str
    start: int
    end: int
    hits: list[Document] = field(default_factory=list)
    doc_id: str | None = None
    """The document version (content hash): a window never mixes two versions."""
    siblings: list[Document] | None = None
    """For chunks placed by ``start_index``: every chunk of the hit's parent document, in
    order (``start``/``end`` index this list). None for chunks ingested by hyde_lc."""
    parent: str | None = None
    """For chunks placed by ``start_index``: which parent document (one key per parent)."""
    note: str | None = None
    """Why this hit cannot be widened (it is returned as found, with this note)."""
    positions: list[int] = field(default_factory=list)
    """Each hit's position in its document (as ``start``/``end``), in hit order."""

    def touches(self, other: Window) -> bool:
        """Same document version, and the ranges overlap or are adjacent."""
        return (
            self.note is None
            and other.note is None
            and (self.source, self.doc_id, self.parent)
            == (other.source, other.doc_id, other.parent)
            and self.start <= other.end + 1
            and other.start <= self.end + 1
        )

    def absorb(self, other: Window) -> None:
        """Extend to cover ``other`` and keep its hits after ours (ours rank higher)."""
        self.start, self.end = min(self.start, other.start), max(self.end, other.end)
        self.hits.extend(other.hits)
        self.positions.extend(other.positions)


_HOW = (
    "Ingest the documents with hyde_lc (ingest_paths, or ingest_documents for your own "
    "Documents), or split them with LangChain's RecursiveCharacterTextSplitter("
    "add_start_index=True), which writes the start_index windows are built from."
)
NUMBERING_KEYS = ("chunk_index", "doc_id")
"""Metadata that marks a chunk ingested by hyde_lc (placed by its chunk number)."""
PER_CHUNK_KEYS = frozenset(
    {"start_index", "chunk_index", "chunk_count", "page", "page_end", "page_label",
     "page_label_end", "gap_before"}
)  # fmt: skip
"""Metadata that differs between the chunks of one document: left out when telling which
chunks come from one parent document (the rest of a splitter's chunk metadata is the
parent's, copied)."""


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def window_of(hit: Document, before: int, after: int) -> Window:
    """The window around one hit ingested by hyde_lc, clipped to its document.

    A hit without what such windows rely on (``source``, integer ``chunk_index`` and
    ``start_index``) gets a window with a `Window.note` saying what it lacks.
    """
    meta = hit.metadata
    missing = [key for key in REQUIRED_METADATA if key not in meta]
    if missing:
        return _noted(
            hit,
            f"this hit lacks {', '.join(missing)} (it has: "
            f"{', '.join(sorted(meta)) or 'no metadata'}), so its place in its document is "
            f"unknown. {_HOW}",
        )
    for key in ("chunk_index", "start_index", "chunk_count"):
        value = meta.get(key, 0)
        if not _integer(value):
            return _noted(
                hit,
                f"windows need {key} as an integer (the chunk's position in its document); "
                f"this hit from {meta.get('source')!r} has {value!r} ({type(value).__name__})",
            )
    index = int(meta["chunk_index"])
    last = int(meta["chunk_count"]) - 1 if "chunk_count" in meta else index + after
    return Window(
        str(meta["source"]),
        max(0, index - before),
        min(last, index + after),
        [hit],
        doc_id=meta.get("doc_id"),
        positions=[index],
    )


def _noted(hit: Document, note: str) -> Window:
    return Window(str(hit.metadata.get("source", "")), 0, 0, [hit], note=note)


def _parent_key(meta: dict[str, Any]) -> str:
    """What a splitter copied from the parent Document into each of its chunks."""
    return json.dumps(
        {k: v for k, v in meta.items() if k not in PER_CHUNK_KEYS},
        sort_keys=True,
        default=str,
    )


class Siblings:
    """The chunks of each parent document, listed from the store once per call.

    For chunks a LangChain splitter made with ``add_start_index=True``: a hit's parent
    document is every chunk of its ``source`` with the same metadata apart from the
    per-chunk keys (`PER_CHUNK_KEYS`), in ``start_index`` order. Where those offsets
    repeat (a loader's pages split one by one, each page's offsets from 0), the parent is
    narrowed to the hit's ``page``.

    Example:
        >>> from langchain_core.vectorstores import InMemoryVectorStore
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
        >>> meta = [{"source": "a.txt", "start_index": i * 5} for i in range(3)]
        >>> ids = store.add_texts(["one.", "two.", "three"], metadatas=meta)
        >>> siblings = Siblings(backend_for(store, "off"))
        >>> window = siblings.window(store.get_by_ids(ids[1:2])[0], 1, 1)
        >>> window.start, window.end, len(window.siblings)
        (0, 2, 3)

    """

    def __init__(self, backend: SearchBackend) -> None:
        self.backend = backend
        self._by_source: dict[str, list[Document] | None] = {}

    def _of_source(self, source: str) -> list[Document] | None:
        if source not in self._by_source:
            self._by_source[source] = self.backend.source_chunks(source)
        return self._by_source[source]

    def window(self, hit: Document, before: int, after: int) -> Window:
        """The window around ``hit`` among its parent's chunks (or a noted one)."""
        meta = hit.metadata
        source = str(meta["source"])
        chunks = self._of_source(source)
        if chunks is None:
            return _noted(
                hit,
                f"{type(self.backend.vectorstore).__name__} cannot list a document's chunks, and "
                "these chunks lack hyde_lc's ids (chunk_size, chunk_overlap, doc_id) to read "
                "them by. Use Chroma, InMemoryVectorStore or FAISS, or ingest with hyde_lc",
            )
        stored = next((c for c in chunks if hit.id is not None and c.id == hit.id), None)
        if stored is None:
            stored = next(
                (
                    c
                    for c in chunks
                    if c.metadata.get("start_index") == meta["start_index"]
                    and c.page_content == hit.page_content
                ),
                None,
            )
        if stored is None:  # gone since the search: returned as found
            gone = f"gone:{hit.id}:{meta['start_index']}"
            return Window(source, 0, 0, [hit], siblings=[hit], parent=gone, positions=[0])
        key = _parent_key(stored.metadata)
        parent = [c for c in chunks if _parent_key(c.metadata) == key]
        label = key
        if _repeated_offsets(parent):
            page = stored.metadata.get("page")
            parent = [c for c in parent if c.metadata.get("page") == page]
            label = f"{key}\0page={page}"
            if page is None or _repeated_offsets(parent):
                return _noted(
                    hit,
                    f"several chunks of {source} start at the same start_index, so their order "
                    "is unknown (chunks of several documents under one source, told apart by "
                    f"no metadata). {_HOW}",
                )
        parent.sort(key=lambda c: int(c.metadata["start_index"]))
        at = next(i for i, c in enumerate(parent) if c is stored)
        return Window(
            source,
            max(0, at - before),
            min(len(parent) - 1, at + after),
            [hit],
            doc_id=stored.metadata.get("doc_id"),
            siblings=parent,
            parent=label,
            positions=[at],
        )


def _repeated_offsets(chunks: Sequence[Document]) -> bool:
    offsets = [c.metadata.get("start_index") for c in chunks]
    return len(set(offsets)) != len(offsets)


def locate(
    hit: Document, before: int, after: int, siblings: Siblings, hyde_note: str | None = None
) -> Window:
    """The window around a hit, by the first way its metadata allows (see the class).

    ``hyde_note``: why chunks numbered by hyde_lc cannot be widened in this store.
    """
    meta = hit.metadata
    if all(key in meta for key in NUMBERING_KEYS):
        return window_of(hit, before, after) if hyde_note is None else _noted(hit, hyde_note)
    if "source" in meta and _integer(meta.get("start_index")):
        return siblings.window(hit, before, after)
    return window_of(hit, before, after)  # says what the hit lacks


def select_windows(
    hits: Sequence[Document],
    k: int,
    before: int,
    after: int,
    siblings: Siblings | None = None,
    hyde_note: str | None = None,
) -> list[Window]:
    """Windows for ranked hits, merged where they overlap or touch, at most ``k`` of them.

    Hits are taken in rank order until ``k`` windows exist; a hit whose window touches a
    chosen one is merged into it (a merge can join two chosen windows, freeing a place).
    ``siblings`` places hits that carry ``start_index`` but not hyde_lc's numbering;
    ``hyde_note`` says why hits numbered by hyde_lc cannot be widened in this store.
    """
    windows: list[Window] = []
    for hit in hits:
        if len(windows) >= k:  # lower-ranked hits no longer widen the chosen windows
            break
        if siblings is None:
            candidate = window_of(hit, before, after)
        else:
            candidate = locate(hit, before, after, siblings, hyde_note)
        touching = [w for w in windows if w.touches(candidate)]
        if touching:
            keep = touching[0]
            keep.absorb(candidate)
            for other in touching[1:]:
                keep.absorb(other)
                windows.remove(other)
        else:
            windows.append(candidate)
    return windows


def gap_between(before: str, after: str, gap: str | None) -> str:
    """What goes between two chunks that do not overlap: the recorded whitespace.

    Chunks ingested before the whitespace was recorded (``gap`` None) get a space,
    unless CJK text meets there: Chinese and Japanese put no spaces between words.

    Example:
        >>> gap_between("灯塔。", "船只", None), gap_between("lamp", "oil", None)
        ('', ' ')

    """
    if gap is not None:
        return gap
    if is_cjk(before[-1:]) or is_cjk(after[:1]):
        return ""
    return " "


def join_chunks(chunks: Sequence[Document]) -> str:
    """Consecutive chunks as one text: the overlap cut once, dropped whitespace restored."""
    text = ""
    end = None
    for chunk in chunks:
        start = int(chunk.metadata["start_index"])
        body = chunk.page_content
        if end is None:
            text = body
        elif start < end:
            text += body[end - start :]
        else:
            text += gap_between(text, body, chunk.metadata.get("gap_before"))
            text += body
        end = max(end or 0, start + len(body))
    return text


def trim_to_budget(chunks: list[Document], hit_indexes: set[int], max_chars: int) -> list[Document]:
    """Keep the hit chunks, then neighbours alternately after and before, within budget."""
    positions = [i for i, c in enumerate(chunks) if c.metadata["chunk_index"] in hit_indexes]
    lo, hi = min(positions), max(positions)
    grew = True
    while grew:
        grew = False
        for side in ("after", "before"):
            new_lo, new_hi = (lo, hi + 1) if side == "after" else (lo - 1, hi)
            fits = new_lo >= 0 and new_hi < len(chunks)
            if fits and len(join_chunks(chunks[new_lo : new_hi + 1])) <= max_chars:
                lo, hi, grew = new_lo, new_hi, True
    return chunks[lo : hi + 1]


def _positioned(chunk: Document, index: int) -> Document:
    """A copy of ``chunk`` that records its position in its document (``chunk_index``)."""
    return chunk.model_copy(update={"metadata": {**chunk.metadata, "chunk_index": index}})


def pages_of(chunks: Sequence[Document]) -> list[int]:
    """Every page the chunks touch (each chunk spans ``page`` to ``page_end``)."""
    pages: set[int] = set()
    for chunk in chunks:
        first = chunk.metadata.get("page")
        if first is not None:
            last = chunk.metadata.get("page_end", first)
            pages.update(range(int(first), int(last) + 1))
    return sorted(pages)


def numbering_conflicts(chunks: Sequence[Document]) -> list[str]:
    """Positions that several chunks of one document claim (a numbering windows cannot use).

    Chunk positions must be unique and consecutive per document: a loader that numbers
    each page from 0 gives two chunks position 0 in one source, and a window around
    either would mix pages.
    """
    seen: dict[tuple[Any, Any, int], str] = {}
    conflicts = []
    for chunk in chunks:
        meta = chunk.metadata
        key = (meta.get("source"), meta.get("doc_id"), int(meta["chunk_index"]))
        if key in seen and seen[key] != chunk.id:
            conflicts.append(f"{key[0]}#{key[2]}")
        seen.setdefault(key, str(chunk.id))
    return conflicts


def window_ids(windows: Sequence[Window]) -> list[str] | None:
    """The ids of every chunk the windows cover, or None if a hit lacks what they need.

    Hits from collections ingested before ``chunk_size``/``chunk_overlap`` were stored
    in the metadata give None (their ids cannot be derived).
    """
    ids: list[str] = []
    for window in windows:
        if window.note is not None or window.siblings is not None:
            continue
        meta = window.hits[0].metadata
        if window.doc_id is None or "chunk_size" not in meta or "chunk_overlap" not in meta:
            return None
        size, overlap = int(meta["chunk_size"]), int(meta["chunk_overlap"])
        ids.extend(
            chunk_id(window.source, str(window.doc_id), size, overlap, index)
            for index in range(window.start, window.end + 1)
        )
    return ids


class NeighborExpandingRetriever(DetailedRetriever):
    """Context-enriched retrieval: each hit widened with neighbouring chunks.

    The contract, the same over every store: every hit the base ranks into the first
    ``k`` windows comes back, in rank order, either widened into a window or, when its
    neighbours cannot be known, exactly as the base found it with
    ``metadata["neighbors_note"]`` saying why (also logged once per reason on the
    ``hyde_lc.retrievers.neighbors`` logger). A hit's metadata never makes it raise. A hit's
    neighbours are found, in this order:

    1. chunks ingested by hyde_lc (``chunk_index`` and ``doc_id``): read by id from any
       store that reads by id (Chroma, ``InMemoryVectorStore``, FAISS; older Chroma
       collections by position);
    2. chunks with ``source`` and an integer ``start_index``, as LangChain's
       ``RecursiveCharacterTextSplitter(add_start_index=True)`` writes: the store's
       chunks of the same parent document (same ``source`` and the same metadata apart
       from the per-chunk keys `PER_CHUNK_KEYS`; narrowed to the same ``page`` where the
       offsets restart per page, as for ``PyPDFLoader``'s pages), in ``start_index``
       order, listed from Chroma, ``InMemoryVectorStore`` or FAISS (`Siblings`);
    3. otherwise none: the hit is returned as found, with the note.

    A window's ``window_start``/``window_end`` are chunk positions in the document;
    ``neighbors_note`` is absent from widened windows.

    Example:
        >>> from hyde_lc import HyDERetriever, NeighborExpandingRetriever, load_llm, open_store
        >>> store = open_store()  # doctest: +SKIP
        >>> hyde = HyDERetriever(vectorstore=store, hypothesis_llm=load_llm(role="hypothesis"))
        ... # doctest: +SKIP
        >>> wide = NeighborExpandingRetriever(base_retriever=hyde, k=4, before=1, after=2)
        ... # doctest: +SKIP
        >>> wide.retrieve_with_details("Why were keepers withdrawn?").documents  # doctest: +SKIP

    """

    base_retriever: BaseRetriever
    """Finds the hits (any retriever over chunks ingested by hyde_lc)."""
    vectorstore: VectorStore | None = None
    """Where neighbours are read; defaults to the base retriever's ``vectorstore``."""
    k: TopK = 4
    """Windows returned; ``invoke(q, k=N)`` overrides it per call."""
    window: int = 1
    """Neighbours on each side (used where ``before``/``after`` are not given)."""
    before: int | None = None
    """Neighbours before each hit (defaults to ``window``)."""
    after: int | None = None
    """Neighbours after each hit (defaults to ``window``)."""
    order: Literal["relevance", "document"] = "relevance"
    """Windows by their best hit's rank, or in reading order (by source, then position)."""
    max_chars: int | None = None
    """Optional budget per window: neighbours are dropped (farthest first) to fit."""
    candidates: int | None = None
    """Base hits requested per call (default 3 x k), so merged windows still make k."""

    _backend: SearchBackend = PrivateAttr()
    _PER_PROCESS: ClassVar[tuple[str, ...]] = ("_backend",)

    @field_validator("window")
    @classmethod
    def _check_window(cls, value: int) -> int:
        if value < 0:
            raise InvalidSettingError(f"window must be 0 or more, got {value}")
        return value

    @model_validator(mode="after")
    def _resolve_store(self) -> NeighborExpandingRetriever:
        if self.vectorstore is None:
            found = getattr(self.base_retriever, "vectorstore", None)
            if not isinstance(found, VectorStore):
                raise InvalidSettingError(
                    "NeighborExpandingRetriever reads neighbours from the store the hits come "
                    f"from, and this {type(self.base_retriever).__name__} does not say which: "
                    "pass vectorstore=STORE (the store you built the base retriever on)"
                )
            self.__dict__["vectorstore"] = found
        for name in ("candidates", "max_chars"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidSettingError(f"{name} must be at least 1, got {value}")
        for name in ("before", "after"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise InvalidSettingError(f"{name} must be 0 or more, got {value}")
        self._remake()
        return self

    def _remake(self) -> None:
        store = self.vectorstore
        assert store is not None  # resolved when made
        self._backend = backend_for(store, "off")

    def to_config(self) -> dict[str, Any]:
        """The retriever and its base as JSON data (see `HyDERetriever.to_config`).

        Raises `NotPortableError` for a base that is neither a `HyDERetriever` nor a
        `NeighborExpandingRetriever`.
        """
        base = self.base_retriever
        if not isinstance(base, HyDERetriever | NeighborExpandingRetriever):
            raise NotPortableError(
                f"the base retriever ({type(base).__name__}) cannot be written as a "
                "configuration: to_config writes a HyDERetriever base. Pickle the retriever "
                "instead to send it to another process"
            )
        return neighbors_config(self, base.to_config())

    @classmethod
    def from_config(
        cls, config: dict[str, Any], *, api_key: str | None = None
    ) -> NeighborExpandingRetriever:
        """The retriever `to_config` described, its base included (``api_key``: as there)."""
        config = check_config(config, "NeighborExpandingRetriever")
        base_config = config["base"]
        base: DetailedRetriever
        if isinstance(base_config, dict) and base_config.get("retriever") == cls.__name__:
            base = cls.from_config(base_config, api_key=api_key)
        else:
            base = HyDERetriever.from_config(base_config, api_key=api_key)
        fields: dict[str, Any] = dict(config.get("settings") or {})
        if config.get("store") is not None:
            fields["vectorstore"] = load_store_config(config["store"], api_key)
        return cls(base_retriever=base, **fields)

    @property
    def span(self) -> tuple[int, int]:
        """(before, after) in force."""
        before = self.window if self.before is None else self.before
        after = self.window if self.after is None else self.after
        return before, after

    @property
    def label(self) -> str:
        """The base's configuration name, then the expansion (``hyde+window=1``)."""
        base = getattr(self.base_retriever, "label", type(self.base_retriever).__name__)
        before, after = self.span
        span = f"window={before}" if before == after else f"before={before},after={after}"
        return f"{base}+{span}" + (",order=document" if self.order == "document" else "")

    # -- reading the windows ---------------------------------------------------------------

    def _fetch(self, windows: list[Window]) -> dict[str, list[Document]] | None:
        """Every chunk the windows cover, in one read, by source, in order.

        Chunks ingested by hyde_lc carry what their ids derive from (`chunk_id`), so the
        windows are read by id: a key lookup, about 5x faster than a metadata filter in
        Chroma (BENCHMARKS.md, "Speed"), and possible in any store that reads by id. Older
        Chroma collections are read by position (`SearchBackend.chunks_around`). None when
        neither works: this store cannot give neighbours.
        """
        ids = window_ids(windows)
        if ids is not None:
            got: list[Document] | None = self._backend.documents(list(dict.fromkeys(ids)))
        else:
            indexes = sorted({i for w in windows for i in range(w.start, w.end + 1)})
            doc_ids = [str(w.doc_id) for w in windows] if all(w.doc_id for w in windows) else None
            got = self._backend.chunks_around([w.source for w in windows], doc_ids, indexes)
        if got is None:
            return None
        by_source: dict[str, list[Document]] = {}
        for doc in got:
            by_source.setdefault(str(doc.metadata["source"]), []).append(doc)
        for chunks in by_source.values():
            chunks.sort(key=lambda d: int(d.metadata["chunk_index"]))
        return by_source

    def _assemble(self, window: Window, chunks: list[Document]) -> Document:
        inside = [
            c
            for c in chunks
            if window.start <= int(c.metadata["chunk_index"]) <= window.end
            and c.metadata.get("doc_id") == window.doc_id
        ]
        hit_indexes = set(window.positions)
        if not {int(c.metadata["chunk_index"]) for c in inside} & hit_indexes:
            # The hit is not (or no longer) in this collection, e.g. its document was
            # re-ingested since the search: return the hit as it was found.
            inside = [_positioned(window.hits[0], window.positions[0])]
            hit_indexes = {window.positions[0]}
        if self.max_chars is not None:
            inside = trim_to_budget(inside, hit_indexes, self.max_chars)
        best = window.hits[0]
        first, last = inside[0].metadata, inside[-1].metadata
        pages = pages_of(inside)
        metadata = {
            **best.metadata,
            "hit_chunk_index": window.positions[0],
            "hit_chunk_indexes": sorted(hit_indexes),
            "window_start": int(first["chunk_index"]),
            "window_end": int(last["chunk_index"]),
            "start_index": int(first["start_index"]),
            "page": pages[0] if pages else first.get("page"),
            "page_end": pages[-1] if pages else last.get("page_end"),
            "pages": pages,
            "score": best.metadata.get("score"),
        }
        # Printed page labels of the window's first and last page (`hyde_lc.answer.page_span`).
        if first.get("page_label") is not None:
            metadata["page_label"] = first["page_label"]
            metadata["page_label_end"] = last.get("page_label_end") or last.get("page_label")
        metadata.pop("chunk_index", None)
        metadata.pop("gap_before", None)
        if window.siblings is None:
            doc_id = first.get("doc_id", window.source)
            id_ = f"{doc_id}:{metadata['window_start']}-{metadata['window_end']}"
        else:  # one id per window whatever the parent: its first chunk's
            id_ = f"{inside[0].id}:{metadata['window_start']}-{metadata['window_end']}"
        return Document(page_content=join_chunks(inside), metadata=metadata, id=id_)

    def _fetch_failure(self, windows: list[Window]) -> tuple[dict[str, list[Document]], str | None]:
        """The chunks of the windows of hyde_lc chunks, or why this store cannot give them."""
        numbered = [w for w in windows if w.note is None and w.siblings is None]
        if not numbered:
            return {}, None
        chunks = self._fetch(numbered)
        if chunks is None:
            return {}, (
                f"{type(self.vectorstore).__name__} cannot give neighbours: its chunks lack "
                "hyde_lc's ids (chunk_size, chunk_overlap, doc_id) and it cannot be read by "
                f"position. {_HOW}"
            )
        conflicts = numbering_conflicts([c for group in chunks.values() for c in group])
        if conflicts:
            return {}, (
                f"chunk positions are not unique per document ({', '.join(conflicts[:3])} "
                "held by several chunks; a loader that numbers each page from 0?), so windows "
                f"would mix passages. {_HOW}"
            )
        return chunks, None

    def _materialise(
        self, windows: list[Window], hits: list[Document], k: int, siblings: Siblings
    ) -> list[Document]:
        if not windows:
            return []
        chunks, why = self._fetch_failure(windows)
        if why is not None:  # chosen again: these hits now stand alone, k of them
            windows = select_windows(hits, k, *self.span, siblings, hyde_note=why)
        out: list[Document] = []
        for window in windows:
            if window.note is not None:
                out.append(self._bare(window.hits[0], window.note))
            elif window.siblings is not None:
                inside = window.siblings[window.start : window.end + 1]
                placed = [_positioned(c, i) for i, c in enumerate(inside, start=window.start)]
                out.append(self._assemble(window, placed))
            else:
                out.append(self._assemble(window, chunks.get(window.source, [])))
        if self.order == "document":
            out.sort(
                key=lambda d: (str(d.metadata.get("source")), d.metadata.get("window_start", 0))
            )
        return out

    def _bare(self, hit: Document, why: str) -> Document:
        """The hit unexpanded, saying why (logged once per reason)."""
        if why not in _WARNED:
            _WARNED.add(why)
            logger.warning("neighbour expansion returns hits unexpanded: %s", why)
        doc = hit.model_copy(deep=True)
        doc.metadata["neighbors_note"] = why
        return doc

    def _enough(
        self, hits: list[Document], request: int, k: int, siblings: Siblings
    ) -> list[Window] | None:
        """The windows if they make ``k`` or the base has no more hits; else None."""
        windows = select_windows(hits, k, *self.span, siblings)
        if len(windows) >= k or len(hits) < request:
            return windows
        size = self._backend.size()  # only read when needed
        return windows if size is not None and request >= size else None

    # -- the retrieval ----------------------------------------------------------------------

    # Merging shrinks the window count, so the base is asked again for twice as many hits
    # until k windows exist or it runs out; `candidates` sets the first request. A base
    # that does per-query work (HyDE's hypotheses) reuses it across rounds
    # (`DetailedRetriever.for_repeated_calls`).

    def _base(self) -> BaseRetriever:
        base = self.base_retriever
        return base.for_repeated_calls() if isinstance(base, DetailedRetriever) else base

    def _round(
        self, base: BaseRetriever, query: str, config: RunnableConfig, n: int
    ) -> Step[HyDEResult]:
        """One search of the base for ``n`` hits, with its details when it gives them."""
        if isinstance(base, DetailedRetriever):
            detailed = base
            return Step(
                lambda: detailed.retrieve_with_details(query, config, k=n),
                lambda: detailed.aretrieve_with_details(query, config, k=n),
            )

        async def found() -> HyDEResult:
            return HyDEResult(query, [], await base.ainvoke(query, config, k=n), label=self.label)

        return Step(
            lambda: HyDEResult(query, [], base.invoke(query, config, k=n), label=self.label),
            found,
        )

    def _store_backend(self) -> SearchBackend | None:
        return self._backend

    def _plan(
        self, query: str, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> Plan[HyDEResult]:
        """Ask the base for hits until they make k windows; read and join the windows."""
        k = valid_k(kwargs.get("k", self.k))
        config = RunnableConfig(callbacks=run_manager.get_child("neighbors.base"))
        base = self._base()
        rounds: list[HyDEResult] = []
        start = time.perf_counter()
        request = self.candidates or 3 * k
        siblings = Siblings(self._backend)  # a document's chunks listed once per call
        while True:
            rounds.append((yield self._round(base, query, config, request)))
            hits = list(rounds[-1].documents)
            windows = yield Step(partial(self._enough, hits, request, k, siblings))
            if windows is not None:
                docs = yield Step(partial(self._materialise, windows, hits, k, siblings))
                return self._details(rounds, docs, query, time.perf_counter() - start)
            request *= 2

    def _details(
        self, rounds: list[HyDEResult], windows: list[Document], query: str, seconds: float
    ) -> HyDEResult:
        """The first round's details (its hypotheses), with the windows and summed timings.

        ``expansion_s`` is the time the expansion added to the base's own stages.
        """
        first = rounds[0] if rounds else HyDEResult(query, [], [], label=self.label)
        timings: dict[str, float] = {}
        for result in rounds:
            for key, value in result.timings.items():
                timings[key] = timings.get(key, 0.0) + value
        staged = sum(value for key, value in timings.items() if key not in PART_TIMINGS)
        timings["expansion_s"] = max(0.0, seconds - staged)
        return replace(
            first,
            documents=retrieved(windows),
            label=self.label,
            timings=timings,
            embedded_texts=[t for r in rounds for t in r.embedded_texts],
            rounds=len(rounds),
        )


_WARNED: set[str] = set()
