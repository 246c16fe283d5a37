"""`HypothesisCache`: a persistent LangChain cache that stores hypotheses as plain text.

LangChain's ``SQLiteCache`` stores each generation as a serialised LangChain object and
rebuilds it with ``langchain_core.load.loads`` on every hit, which its own documentation
calls unsafe for files from elsewhere: a crafted entry can name another class to build.
Hypothesis caches are shared (the benchmark tables ship with theirs), so this cache
stores only text: one row per (prompt, LLM parameter string) holding a JSON list of
strings, and it builds plain ``ChatGeneration`` objects from those strings on a hit.

It also reads files written by ``SQLiteCache`` (its ``full_llm_cache`` table), without
``loads``: it parses each stored JSON document and takes only the string found at
``kwargs.text`` (or ``kwargs.message.kwargs.content``) of a ``Generation`` or
``ChatGeneration``; anything else is a miss. New entries go to this cache's own table
in the same file; the old rows are only read (and deleted by ``clear``).

The standard library's ``sqlite3`` is used directly (no ORM): the schema is one table.

Example:
    >>> from hyde_lc.hyde.hypothesis_cache import HypothesisCache
    >>> cache = HypothesisCache("/tmp/hypotheses.sqlite")  # doctest: +SKIP
    >>> retriever = HyDERetriever(vectorstore=store, hypothesis_llm=llm,
    ...                           hypothesis_cache=cache)  # doctest: +SKIP

"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.caches import BaseCache
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, Generation

from hyde_lc.errors import HydeLcError, NotPortableError

TABLE = "hyde_lc_hypotheses"
LEGACY_TABLE = "full_llm_cache"
"""``SQLiteCache``'s table, read (never written) for files it created."""
_GENERATION_IDS = ("Generation", "ChatGeneration", "GenerationChunk", "ChatGenerationChunk")


class HypothesisCacheError(HydeLcError):
    """The hypothesis cache file cannot be used (not SQLite, unreadable, read-only)."""


def legacy_text(response: str | None) -> str | None:
    """The text of one ``SQLiteCache`` row, read as data; None if it holds no plain text.

    Example:
        >>> legacy_text('{"lc": 1, "type": "constructor", '
        ...             '"id": ["langchain", "schema", "output", "ChatGeneration"], '
        ...             '"kwargs": {"text": "Tides follow the moon."}}')
        'Tides follow the moon.'

    """
    if not response:
        return None
    try:
        document = json.loads(response)
    except (TypeError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("type") != "constructor":
        return None
    ident = document.get("id")
    if not isinstance(ident, list) or not ident or ident[-1] not in _GENERATION_IDS:
        return None
    kwargs = document.get("kwargs")
    if not isinstance(kwargs, dict):
        return None
    text = kwargs.get("text")
    if isinstance(text, str):
        return text
    message = kwargs.get("message")
    inner = message.get("kwargs") if isinstance(message, dict) else None
    content = inner.get("content") if isinstance(inner, dict) else None
    return content if isinstance(content, str) else None


class HypothesisCache(BaseCache):
    """A SQLite cache of generated texts, never deserialising objects (module docstring).

    Example:
        >>> cache = HypothesisCache(":memory:")
        >>> cache.update("prompt#sample=0", "llm", [Generation(text="A passage.")])
        >>> [g.text for g in cache.lookup("prompt#sample=0", "llm")]
        ['A passage.']

    """

    def __init__(self, database_path: str | Path) -> None:
        self.path = str(database_path)
        self._lock = threading.Lock()
        self._connection = (
            sqlite3.connect(":memory:", check_same_thread=False)
            if self.path == ":memory:"
            else None
        )
        # Reading the schema checks the file now; the table is created on the first
        # write only, so a run that only reads leaves the file untouched.
        try:
            self._legacy = self._has_table(LEGACY_TABLE)
            self._own = self._has_table(TABLE)
        except HypothesisCacheError as exc:
            raise HypothesisCacheError(
                f"cannot use {self.path} as the hypothesis cache ({exc.__cause__}): give a "
                "new file name, or an SQLite file written by hyde-lc"
            ) from exc.__cause__

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its file: another process (a worker) opens the same file.

        SQLite lets several processes share it. ``":memory:"`` lives in this process only
        and raises `NotPortableError`.
        """
        if self._connection is not None:
            raise NotPortableError(
                "a HypothesisCache(':memory:') lives in this process only, so it cannot be "
                "sent to another one: give it a file (HypothesisCache('hypotheses.sqlite')), "
                "which every worker shares, or leave hypothesis_cache unset"
            )
        return (type(self), (self.path,))

    def _has_table(self, name: str) -> bool:
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        return bool(self._run(query, (name,)))

    def _connect(self) -> sqlite3.Connection:
        if self._connection is not None:
            return self._connection
        return sqlite3.connect(self.path, timeout=30)

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            db = self._connect()
            try:
                with db:
                    return db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise HypothesisCacheError(
                    f"the hypothesis cache {self.path} failed ({exc})"
                ) from exc
            finally:
                if db is not self._connection:
                    db.close()

    def texts(self, prompt: str, llm_string: str) -> list[str] | None:
        """The cached texts for this key, or None."""
        self._own = self._own or self._has_table(TABLE)  # another process may have written
        rows = (
            []
            if not self._own
            else self._run(
                f"SELECT texts FROM {TABLE} WHERE prompt = ? AND llm = ?", (prompt, llm_string)
            )
        )
        if rows:
            try:
                stored = json.loads(rows[0][0])
            except ValueError:
                stored = None
            if isinstance(stored, list) and stored and all(isinstance(t, str) for t in stored):
                return stored
        if not self._legacy:
            return None
        legacy = self._run(
            f"SELECT response FROM {LEGACY_TABLE} WHERE prompt = ? AND llm = ? ORDER BY idx",
            (prompt, llm_string),
        )
        found = [legacy_text(row[0]) for row in legacy]
        if not found or any(text is None for text in found):
            return None
        return [str(text) for text in found]

    def lookup(self, prompt: str, llm_string: str) -> list[Generation] | None:
        """Generations built from the cached texts (no stored object is ever loaded)."""
        texts = self.texts(prompt, llm_string)
        if texts is None:
            return None
        return [ChatGeneration(message=AIMessage(content=text)) for text in texts]

    def update(self, prompt: str, llm_string: str, return_val: Sequence[Generation]) -> None:
        """Store the texts of ``return_val`` (only their text is kept)."""
        texts = [generation.text for generation in return_val]
        if not texts or not all(isinstance(t, str) for t in texts):
            return
        if not self._own:
            self._run(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (prompt TEXT NOT NULL, "
                "llm TEXT NOT NULL, texts TEXT NOT NULL, PRIMARY KEY (prompt, llm))"
            )
            self._own = True
        self._run(
            f"INSERT OR REPLACE INTO {TABLE} (prompt, llm, texts) VALUES (?, ?, ?)",
            (prompt, llm_string, json.dumps(texts, ensure_ascii=False)),
        )

    def clear(self, **kwargs: Any) -> None:
        """Delete every entry, including those an ``SQLiteCache`` wrote to the file."""
        if self._own:
            self._run(f"DELETE FROM {TABLE}")
        if self._legacy:
            self._run(f"DELETE FROM {LEGACY_TABLE}")

    def __len__(self) -> int:
        """Entries this cache wrote."""
        if not self._own:
            return 0
        return int(self._run(f"SELECT COUNT(*) FROM {TABLE}")[0][0])
