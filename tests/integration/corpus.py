"""Generated corpora and checks of what a collection holds, for the fault and server tests."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

CHUNK_SIZE, CHUNK_OVERLAP = 400, 40
WORDS = [
    "lamp", "lens", "keeper", "tower", "reef", "beacon", "flash", "signal", "harbour", "storm",
    "fog", "horn", "prism", "mirror", "oil", "wick", "clockwork", "shutter", "gallery",
    "lantern", "rock", "coast", "ship", "pilot", "chart", "tide", "wave", "granite", "iron",
    "copper", "glass", "brass", "mercury", "rotation", "beam", "range", "order",
]  # fmt: skip

Items = dict[str, tuple[str, dict]]
"""A collection's records: id -> (text, metadata)."""


def write_corpus(folder: Path, names: list[str], sentences: int = 22) -> list[Path]:
    """Small text files of varied words (22 sentences: about 6 chunks of 400 characters)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        rng = random.Random(name)
        lines = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 14))).capitalize() + "."
            for _ in range(sentences)
        ]
        body = "\n\n".join(" ".join(lines[i : i + 4]) for i in range(0, len(lines), 4))
        path = folder / name
        path.write_text(f"# {name}\n\n{body}", encoding="utf-8")
        paths.append(path.resolve())
    return paths


def documents(items: Items) -> dict[tuple[str, str], list[int]]:
    """(source, doc_id) -> the chunk indexes present, sorted."""
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for _, meta in items.values():
        out[(meta["source"], meta["doc_id"])].append(int(meta["chunk_index"]))
    return {key: sorted(indexes) for key, indexes in out.items()}


def half_written(items: Items) -> list[str]:
    """Documents whose chunks are not exactly 0..chunk_count-1, once each."""
    counts = {(m["source"], m["doc_id"]): int(m["chunk_count"]) for _, m in items.values()}
    return [
        f"{Path(source).name}: chunks {indexes} of {counts[(source, doc_id)]}"
        for (source, doc_id), indexes in documents(items).items()
        if indexes != list(range(counts[(source, doc_id)]))
    ]
