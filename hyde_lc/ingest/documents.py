"""`ingest_documents`: LangChain Documents (from any loader or splitter) into a hyde_lc collection.

`hyde_lc.ingest.files.ingest_paths` reads and splits files itself. A LangChain user often has
Documents already: from ``PyPDFLoader``, ``WebBaseLoader``, a ``RecursiveCharacterTextSplitter``
of their own. `ingest_documents` stores them as given, in the same hybrid collection
(vectors and BM25 index written together, `hyde_lc.store.collection`):

* each Document is one chunk: its text and metadata are kept (``page`` and ``page_label``
  from ``PyPDFLoader``, ``start_index`` from a splitter's ``add_start_index=True``, ...);
  no further splitting. One addition: a Document with an integer ``page`` (LangChain's
  loaders count pages from 0) and no ``page_label`` gets ``page_label`` = page + 1, so
  citations show the page a reader finds (`hyde_lc.answer.page_span`);
* a Document's ``id`` is kept; one without an id gets a stable id derived from its
  ``source``, metadata and text, so ingesting the same Documents again embeds nothing;
* by default the call *replaces* each source it is given (``metadata["source"]``, which
  every LangChain loader sets): chunks of that source that the call does not bring are
  deleted once the new ones are written, as `ingest_paths` does with a changed file.
  ``replace=False`` only adds and updates. Sources the call does not bring are left
  alone: sources are whatever the loader recorded (URLs, relative names), so there is no
  folder to keep in step as ``ingest_paths(..., remove_missing=True)`` does; delete a
  source no longer wanted with ``store.delete(where={"source": ...})``.

Bad input fails before anything is written, with an `IngestError`: a metadata value
Chroma cannot store (a dict, an empty list), or one id given to two different Documents.
Lone surrogates (not valid Unicode) in a Document's text, metadata or id are replaced with
U+FFFD, said in its source's notes and once in the log.

Example:
    >>> from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
    >>> from hyde_lc import ingest_documents, open_store
    >>> store = open_store("/tmp/my-store")  # doctest: +SKIP
    >>> docs = [Document("Fresnel lenses", metadata={"source": "notes.txt"})]
    >>> print(ingest_documents(docs, store).summary())  # doctest: +SKIP
    added         1 chunks  notes.txt

"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from tqdm.auto import tqdm

from hyde_lc.core.language import valid_unicode
from hyde_lc.errors import IngestError
from hyde_lc.ingest.files import FileResult, IngestReport, Status, check_counts
from hyde_lc.store.chroma_collection import SEQ, embedding_dimension
from hyde_lc.store.collection import HybridCollection, Write
from hyde_lc.store.location import server_lost_as_error
from hyde_lc.store.vectorstore import HydeChroma

__all__ = ["document_chunk_id", "ingest_documents"]

logger = logging.getLogger(__name__)

NO_SOURCE = ""
"""The source reported for Documents without ``metadata["source"]`` (never replaced)."""


def document_chunk_id(doc: Document) -> str:
    """The id `ingest_documents` gives a Document without one: from its metadata and text.

    Example:
        >>> a = Document("tides", metadata={"source": "a.txt", "start_index": 0})
        >>> document_chunk_id(a) == document_chunk_id(a.model_copy())
        True

    """
    meta = json.dumps(doc.metadata or {}, sort_keys=True, default=str, ensure_ascii=False)
    key = f"document\0{meta}\0{doc.page_content}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def ingest_documents(
    documents: Iterable[Document],
    store: HydeChroma,
    *,
    replace: bool = True,
    batch_size: int = 64,
    progress: bool = True,
) -> IngestReport:
    """Store LangChain Documents, as given, in ``store`` (a collection from `open_store`).

    Each Document becomes one chunk, with its metadata and id (a stable one,
    `document_chunk_id`, when it has none). Chunks already in the collection with the
    same id and text are not embedded again. With ``replace`` (the default), each
    source in ``documents`` ends up holding exactly the chunks given for it: the others
    of that source are deleted after the new ones are written. Documents without a
    ``source`` are added or updated by id only.

    A source of up to one Chroma write (5,461 chunks) is written in one call, whole or
    not at all (consecutive sources with few chunks share one call and one embedding
    pass of up to ``batch_size`` chunks); a larger one in several calls, so a search
    running meanwhile may see part of it. Returns one `FileResult` per source (status
    ``added``, ``replaced`` or ``unchanged``), in the order the sources first appear.
    ``progress`` shows a bar of the chunks as they are embedded (on by default, as in
    `ingest_paths`; ``progress=False`` in scripts and tests).
    """
    hybrid = HybridCollection.of(store)
    chroma, embeddings = hybrid.chroma, hybrid.embeddings
    if embeddings is None:
        raise IngestError("the store has no embedding function; open it with open_store()")
    check_counts(batch_size=batch_size)
    chroma.ensure_writable()
    chroma.check_embeddings(embeddings)
    replaced: dict[str, int] = {}
    groups = _by_source(list(documents), replaced)
    if not groups:
        return IngestReport([])
    resume = "ingest the same Documents again: chunks already written are not embedded twice"
    total = sum(len(chunks) for chunks in groups.values())
    given = {id_ for chunks in groups.values() for id_ in chunks}
    results: dict[str, FileResult] = {}
    with (
        server_lost_as_error(chroma.location, resume),
        hybrid.writing() as write,
        tqdm(total=total, unit="chunk", desc="embedding", disable=not progress) as bar,
    ):
        chroma.prepare_write(embeddings, embedding_dimension(embeddings))
        limit = chroma.max_write()
        size = min(limit, batch_size)
        batch: list[_SourcePlan] = []
        queued = 0  # chunks in the batch

        def flush() -> None:
            nonlocal queued
            _upsert(write, [d for plan in batch for d in plan.missing], batch, batch_size, bar)
            for plan in batch:
                results[plan.source] = _finish(write, plan, given, limit)
            batch.clear()
            queued = 0

        for source, chunks in groups.items():
            plan = _plan_source(write, source, chunks, replace, bar)
            if not plan.missing:  # all its chunks are stored: only deletes, if any
                results[source] = _finish(write, plan, given, limit)
                continue
            if len(plan.missing) > limit:  # one source in several writes
                flush()
                for start in range(0, len(plan.missing), limit):
                    part = plan.missing[start : start + limit]
                    _upsert(write, part, [plan], batch_size, bar)
                results[source] = _finish(write, plan, given, limit)
                continue
            # Sources with few new chunks share one embedding pass and one Chroma write
            # (one transaction: each source whole or not at all).
            if queued + len(plan.missing) > size:
                flush()
            batch.append(plan)
            queued += len(plan.missing)
            if queued >= size:
                flush()
        flush()
    for source, count in replaced.items():
        results[source].notes.append(_replaced_note(count))
    if replaced:
        logger.warning(
            "ingest_documents: %s (%s)", _replaced_note(sum(replaced.values())), _names(replaced)
        )
    return IngestReport([results[source] for source in groups])


def _by_source(
    documents: list[Document], replaced: dict[str, int]
) -> dict[str, dict[str, Document]]:
    """Documents by source, then by id (given or derived), after checking each one.

    Lone surrogates are replaced (`_valid_unicode`); ``replaced`` gets how many, by source.
    """
    groups: dict[str, dict[str, Document]] = {}
    seen: dict[str, Document] = {}
    for number, given in enumerate(documents):
        if not isinstance(given, Document):
            raise IngestError(
                f"ingest_documents takes LangChain Documents; item {number} is a "
                f"{type(given).__name__}. Wrap texts as Document(text, metadata={{...}})"
            )
        doc, count = _valid_unicode(given)
        if count:
            source = doc.metadata.get("source")
            key = NO_SOURCE if source is None else str(source)
            replaced[key] = replaced.get(key, 0) + count
        meta = dict(doc.metadata or {})
        _check_metadata(meta, number)
        page = meta.get("page")
        if "page_label" not in meta and isinstance(page, int) and not isinstance(page, bool):
            meta["page_label"] = str(page + 1)  # a loader's 0-based page, as printed
        id_ = str(doc.id) if doc.id else document_chunk_id(doc)
        earlier = seen.get(id_)
        if earlier is not None:
            if (earlier.page_content, earlier.metadata) != (doc.page_content, meta):
                raise IngestError(
                    f"two different Documents have the id {id_!r} (item {number} and an "
                    "earlier one): give each chunk its own id, or none (ingest_documents "
                    "then derives one from its source, metadata and text)"
                )
            continue  # the same chunk twice: stored once
        stored = Document(doc.page_content, metadata=meta, id=id_)
        seen[id_] = stored
        source = meta.get("source")
        key = NO_SOURCE if source is None else str(source)
        groups.setdefault(key, {})[id_] = stored
    return groups


def _valid_unicode(doc: Document) -> tuple[Document, int]:
    """``doc`` with lone surrogates in its text, metadata and id replaced by U+FFFD; how many.

    A lone surrogate (a JSON escape without its pair, a file name that is not UTF-8) is
    not valid Unicode: the embedding model's tokenizer, UTF-8 and Chroma refuse it.
    """
    text, in_text = valid_unicode(doc.page_content)
    metadata, in_metadata = valid_unicode(dict(doc.metadata or {}))
    id_, in_id = valid_unicode(doc.id)
    count = in_text + in_metadata + in_id
    if not count:
        return doc, 0
    return Document(text, metadata=metadata, id=id_), count


def _replaced_note(count: int) -> str:
    """The note of a source whose Documents held ``count`` lone surrogates."""
    plural = "s" if count > 1 else ""
    return (
        f"{count} lone surrogate{plural} (not valid Unicode) in the Documents' text or "
        "metadata replaced with U+FFFD"
    )


def _names(sources: Iterable[str]) -> str:
    """Up to three sources by name, and how many more."""
    names = [source or "(no source)" for source in sources]
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ", ".join(names[:3]) + more


def _check_metadata(meta: dict[str, Any], number: int) -> None:
    """Refuse what Chroma cannot store, before anything is written."""
    for key, value in meta.items():
        bad = isinstance(value, dict) or (isinstance(value, list | tuple) and not value)
        if isinstance(value, list | tuple):
            bad = bad or any(not isinstance(v, str | int | float | bool) for v in value)
        elif not bad:
            bad = value is not None and not isinstance(value, str | int | float | bool)
        if bad:
            raise IngestError(
                f"Document {number} has metadata {key}={value!r}, which Chroma cannot store "
                "(it takes str, int, float, bool, and non-empty lists of those). Drop or "
                "flatten it first, e.g. with langchain_community.vectorstores.utils."
                "filter_complex_metadata(documents)"
            )


@dataclass
class _SourcePlan:
    """One source's chunks given against what the collection holds."""

    source: str
    replacing: bool
    """Whether the call replaces this source (then ``existing`` is read)."""
    ids: list[str]
    existing: set[str]
    """Ids the collection holds for this source (read only when replacing it)."""
    held: set[str]
    """Ids given that the collection holds already."""
    missing: list[Document]
    """Chunks to write: new, or stored with another text or metadata."""
    stored_keys: dict[str, set[str]]
    """Each held chunk's metadata keys as stored."""


def _plan_source(
    write: Write, source: str, chunks: dict[str, Document], replace: bool, bar: tqdm
) -> _SourcePlan:
    """What one source's chunks need: the reads, before any write of this source."""
    chroma = write.owner.chroma
    ids = list(chunks)
    existing: set[str] = set()
    if replace and source != NO_SOURCE:
        for page in chroma.pages({"source": source}, include=()):
            existing.update(str(i) for i in page["ids"])
    held = chroma.present_ids(ids)
    present, stored_keys = _unchanged(write, chunks, held)
    bar.update(len(present))
    missing = [chunks[i] for i in ids if i not in present]
    replacing = replace and source != NO_SOURCE
    return _SourcePlan(source, replacing, ids, existing, held, missing, stored_keys)


def _upsert(
    write: Write, docs: list[Document], plans: list[_SourcePlan], batch_size: int, bar: tqdm
) -> None:
    """Embed ``docs`` and write them in one Chroma call (all or none)."""
    if not docs:
        return
    keys = {id_: k for plan in plans for id_, k in plan.stored_keys.items()}
    write.upsert(
        [str(d.id) for d in docs],
        _embed(write.owner.embeddings, docs, batch_size, bar),
        # Chroma merges a record's metadata on upsert: a key dropped is set to None
        [{**dict.fromkeys(keys.get(str(d.id), ())), **d.metadata} for d in docs],
        [d.page_content for d in docs],
    )


def _finish(write: Write, plan: _SourcePlan, given: set[str], limit: int) -> FileResult:
    """After its chunks are written: delete what the source no longer holds; its result.

    A chunk this call gives under another source has moved there, and is kept.
    """
    stale = sorted(plan.existing - given)
    write.delete(stale, limit)
    moved_out = plan.existing - set(plan.ids) - set(stale)
    # A source replaced had chunks of its own before; one only added to had any of its ids.
    status: Status = "replaced" if (plan.existing if plan.replacing else plan.held) else "added"
    if not (plan.missing or stale or moved_out):
        status = "unchanged"
    return FileResult(plan.source or "(no source)", status, len(plan.ids), [], len(plan.missing))


def _unchanged(
    write: Write, chunks: dict[str, Document], held: set[str]
) -> tuple[set[str], dict[str, set[str]]]:
    """The ``held`` ids stored with the same text and metadata, and each one's keys now."""
    same: set[str] = set()
    keys: dict[str, set[str]] = {}
    if not held:
        return same, keys
    wanted = sorted(held)
    step = write.owner.chroma.max_write()
    for start in range(0, len(wanted), step):
        got = write.collection.get(
            ids=wanted[start : start + step], include=["documents", "metadatas"]
        )
        for id_, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
            doc = chunks[id_]
            stored = {k: v for k, v in (meta or {}).items() if k != SEQ}
            keys[id_] = set(stored)
            expected = {k: v for k, v in doc.metadata.items() if v is not None}
            if text == doc.page_content and stored == _as_stored(expected):
                same.add(id_)
    return same, keys


def _as_stored(meta: dict[str, Any]) -> dict[str, Any]:
    """Metadata as Chroma gives it back (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in meta.items()}


def _embed(embeddings: Embeddings, docs: list[Document], batch_size: int, bar: tqdm) -> np.ndarray:
    parts = []
    for start in range(0, len(docs), batch_size):
        batch = docs[start : start + batch_size]
        parts.append(
            np.asarray(embeddings.embed_documents([d.page_content for d in batch]), np.float32)
        )
        bar.update(len(batch))
    return np.concatenate(parts)
