"""Reading a BEIR-layout dataset: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``.

Example:
    >>> from hyde_lc.bench.beir import load_beir
    >>> data = load_beir("scifact", split="test")  # doctest: +SKIP
    >>> len(data.corpus), len(data.queries)  # doctest: +SKIP
    (5183, 300)

"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from hyde_lc.errors import HydeLcError


@dataclass
class BeirDataset:
    """A corpus, the queries that have judgements in one split, and those judgements."""

    name: str
    corpus: dict[str, str]
    """Document id -> ``title + " " + text`` (the BEIR convention for dense retrieval)."""
    queries: dict[str, str]
    """Query id -> text, only queries judged in the split, in sorted-id order."""
    qrels: dict[str, dict[str, int]]
    """Query id -> {document id: relevance}."""

    def fingerprint(self) -> str:
        """A short hash of the corpus (ids and texts), to key cached embeddings."""
        digest = hashlib.sha256()
        for doc_id in sorted(self.corpus):
            digest.update(doc_id.encode() + b"\0" + self.corpus[doc_id].encode() + b"\0")
        return digest.hexdigest()[:16]


def _sort_key(query_id: str) -> tuple[int, str]:
    return (int(query_id), query_id) if query_id.isdigit() else (1 << 62, query_id)


def load_beir(folder: str | Path, split: str = "test", limit: int | None = None) -> BeirDataset:
    """Load a BEIR folder; ``limit`` keeps the first N judged queries (sorted by id)."""
    root = Path(folder).expanduser()
    paths = {name: root / name for name in ("corpus.jsonl", "queries.jsonl")}
    paths["qrels"] = root / "qrels" / f"{split}.tsv"
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise HydeLcError(
            f"{root} is not a BEIR dataset folder: missing {', '.join(missing)} "
            "(expected corpus.jsonl, queries.jsonl and qrels/<split>.tsv)"
        )
    corpus = {}
    with paths["corpus.jsonl"].open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            corpus[str(row["_id"])] = f"{row.get('title', '')} {row['text']}".strip()
    qrels: dict[str, dict[str, int]] = {}
    with paths["qrels"].open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    texts = {}
    with paths["queries.jsonl"].open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            texts[str(row["_id"])] = row["text"]
    judged = sorted((q for q in qrels if q in texts), key=_sort_key)[:limit]
    return BeirDataset(
        name=root.name,
        corpus=corpus,
        queries={q: texts[q] for q in judged},
        qrels={q: qrels[q] for q in judged},
    )
