"""Writes on a full disk: refused before they start, undone when they fail, said plainly.

Embedded Chroma logs a write (its ``embeddings_queue`` table) before applying it to the
collection's segments. When applying fails, on a full disk typically, the write stays
logged and Chroma applies it once it can: at the next open of the folder after space is
freed. A write reported as failed would then appear later. So every write of a hyde_lc
collection (`hyde_lc.store.collection.Write`):

* is refused before it starts when the device holding the store has less free space than
  it may need (`check_room`, an estimate about twice what Chroma and the lexical index
  take for it), so that a full disk rarely meets a write half-way: Chroma writes its
  vector index files in place and a write cut short there can damage them;
* is refused too when the device holding the collection's BM25 index, if it is another
  one, has less free space than the index may need (`check_index_room`);
* is cancelled when its Chroma call fails anyway: a second, small call deletes the
  records the failed one would have created and writes back those it would have
  replaced. Chroma logs that call after the failed one, so whenever the log is applied
  the collection comes out as before.

The error names the cause and what to do (`NoSpaceError`).

Example:
    >>> from hyde_lc.store.disk_space import space_needed
    >>> space_needed(records=100, dimension=384, text_bytes=100_000, metadata_bytes=50_000)
    4067776

"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hyde_lc.errors import StoreError

MARGIN_BYTES = 1024 * 1024
"""Room asked on top of every write's estimate (journals, the lexical index's merges)."""
INDEX_MARGIN_BYTES = 128 * 1024
"""Room asked of a BM25 index's own device on top of a write's estimate: a commit writes
about a dozen small files, each taking at least a block."""
LOW_SPACE_BYTES = 64 * 1024 * 1024
"""Below this much free space, a failure of Chroma to apply a write is put down to it."""
_FULL_WORDS = ("no space left", "database or disk is full", "disk full", "quota exceeded")
_APPLY_WORDS = ("compaction", "failed to apply logs", "backfill", "hnsw")


class NoSpaceError(StoreError):
    """The device holding the store has no room for a write; the message says what to do."""


def space_needed(records: int, dimension: int, text_bytes: int, metadata_bytes: int) -> int:
    """Bytes of free space a write of ``records`` records asks for (an upper estimate).

    Measured with embedded Chroma 1.5: a 1,000-character chunk with hyde_lc's metadata
    and a 384-dimensional vector grows the store by about 14 KB (Chroma's log, its
    metadata segment with the full-text index, the vector index, and the lexical index).
    Twice the estimate below is asked, plus `MARGIN_BYTES`.
    """
    per_record = 2 * 4 * dimension + 1024  # the vector in the log and the vector index
    each = records * per_record + 8 * text_bytes + 6 * metadata_bytes
    return 2 * each + MARGIN_BYTES


def index_space_needed(text_bytes: int, metadata_bytes: int) -> int:
    """Bytes of free space a write asks of the device holding a BM25 index (an upper estimate).

    The index holds each chunk's terms, id and filterable metadata: less than its text.

    Example:
        >>> index_space_needed(text_bytes=100_000, metadata_bytes=50_000)
        431072

    """
    return 2 * (text_bytes + metadata_bytes) + INDEX_MARGIN_BYTES


def nearest_existing(folder: Path) -> Path:
    """``folder``, or its nearest ancestor that exists."""
    return next((p for p in (folder, *folder.parents) if p.exists()), folder)


def same_device(folder: Path, other: Path | None) -> bool:
    """Whether ``folder`` and ``other`` (or where they would be made) are on one device."""
    if other is None:
        return False
    try:
        return os.stat(nearest_existing(folder)).st_dev == os.stat(nearest_existing(other)).st_dev
    except OSError:
        return False


def free_bytes(folder: Path) -> int | None:
    """Free space on the device holding ``folder`` for this user (None if unknown)."""
    for path in (folder, *folder.parents):
        try:
            found = os.statvfs(path)
        except OSError:
            continue
        return found.f_bavail * found.f_frsize
    return None


def _size(count: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def no_space_text(
    folder: Path, free: int | None, detail: str = "", need: int | None = None, what: str = ""
) -> str:
    """``no space left on the device holding <what><folder> (<free>, <need>); <detail>``."""
    room = [f"{_size(free)} free"] if free is not None else []
    if need is not None:
        room.append(f"this write needs about {_size(need)}")
    text = f"no space left on the device holding {what}{folder}"
    if room:
        text += f" ({', '.join(room)})"
    return f"{text}; {detail}" if detail else text


def no_space_message(
    folder: Path,
    free: int | None,
    detail: str = "",
    undone: bool | None = True,
    need: int | None = None,
    what: str = "",
) -> str:
    """The message for a write refused or failed for lack of space on ``folder``'s device.

    ``undone``: True when the write left the collection as before, False when it could
    not be undone, None when not known (a failure outside the write's own Chroma call).
    ``what`` names what ``folder`` is (``"the BM25 index "``), if not the store.
    """
    text = no_space_text(folder, free, detail, need, what)
    fix = f"{text}. Free space there, then run the same command again"
    if undone:
        return f"{fix}; the collection is as before."
    if undone is None:
        return f"{fix}: it completes what this run left undone."
    return (
        f"{fix}: the failed write could not be undone on the full disk (it may show once "
        "space is freed), and running the command again completes it."
    )


def check_room(
    folder: Path | None,
    records: int,
    dimension: int,
    texts: Sequence[str],
    metadatas: Sequence[dict[str, Any] | None],
) -> None:
    """Refuse a write the device holding ``folder`` (an embedded store) has no room for.

    Nothing is checked for a Chroma server or an in-memory store (``folder`` None).
    """
    if folder is None or not records:
        return
    text_bytes, metadata_bytes = _sizes(texts, metadatas)
    need = space_needed(records, dimension, text_bytes, metadata_bytes)
    check_free(folder, need)


def check_index_room(
    index_folder: Path | None,
    store_folder: Path | None,
    texts: Sequence[str] = (),
    metadatas: Sequence[dict[str, Any] | None] = (),
) -> None:
    """Refuse a write the device holding a BM25 index folder has no room for.

    Checked only when that device is not the store's own (`check_room` counts the index
    there); without ``texts``, for `INDEX_MARGIN_BYTES`. The message names the index
    folder and the space free on its device.
    """
    if index_folder is None or same_device(index_folder, store_folder):
        return
    need = index_space_needed(*_sizes(texts, metadatas))
    free = free_bytes(index_folder)
    if free is not None and free < need:
        raise NoSpaceError(no_space_message(index_folder, free, need=need, what="the BM25 index "))


def _sizes(texts: Sequence[str], metadatas: Sequence[dict[str, Any] | None]) -> tuple[int, int]:
    """Bytes of the texts (as UTF-8) and of the metadata (as written out)."""
    text_bytes = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
    return text_bytes, sum(len(repr(meta or {})) for meta in metadatas)


def check_free(folder: Path | None, need: int) -> None:
    """Raise `NoSpaceError` when ``folder``'s device has less than ``need`` bytes free."""
    if folder is None:
        return
    free = free_bytes(folder)
    if free is not None and free < need:
        raise NoSpaceError(no_space_message(folder, free, need=need))


def is_no_space(exc: BaseException, folder: Path | None) -> bool:
    """Whether ``exc`` (or an exception it came from) is a write failing for lack of space.

    An ``OSError`` says so by its number; SQLite by its words. Chroma's failure to apply a
    logged write names no cause: it counts when the device has little room left.
    """
    seen: BaseException | None = exc
    words = ""
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        words += f" {seen}".lower()
        seen = seen.__cause__ or seen.__context__
        if seen is exc:
            break
    if any(word in words for word in _FULL_WORDS):
        return True
    if folder is None or not any(word in words for word in _APPLY_WORDS):
        return False
    free = free_bytes(folder)
    return free is not None and free < LOW_SPACE_BYTES


def logged_anyway(exc: BaseException) -> bool:
    """Whether Chroma's error says the call was logged and failed later, when applied.

    Such a call takes effect when the log is applied (an undo logged after it too).
    """
    return any(word in str(exc).lower() for word in ("compaction", "failed to apply logs"))


def as_no_space(
    exc: BaseException, folder: Path | None, undone: bool | None = None
) -> Exception | None:
    """``exc`` as a `NoSpaceError` if a full disk caused it, else None."""
    if isinstance(exc, NoSpaceError) or folder is None or not is_no_space(exc, folder):
        return None
    detail = f"{type(exc).__name__}: {exc}"
    return NoSpaceError(no_space_message(folder, free_bytes(folder), detail, undone))


@contextmanager
def no_space_as_error(folder: Path | None) -> Iterator[None]:
    """Run the block; a failure for lack of space on ``folder``'s device says so.

    It becomes a `NoSpaceError` saying what to do; every other failure passes through.
    """
    try:
        yield
    except Exception as exc:
        error = as_no_space(exc, folder)
        if error is None:
            raise
        raise error from exc
