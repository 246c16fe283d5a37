"""Does neighbour expansion put the answer in the context? Plain vs expanded retrieval.

Two question sets, standard dense retrieval (MiniLM int8, no LLM, so the effect of expansion
is isolated):
- the bundled sample (hyde_lc/sample/questions.jsonl, 10 answerable): *contains* = every
  answer keyword appears in the retrieved context;
- the tutorial set (shared/data/tutorial/val.json over AI_Information.pdf, answerable only):
  *recall* = share of the ideal answer's content words (4+ letters, not stopwords) found in
  the context, averaged (a lexical proxy: the ideal answers are paraphrases).
Compared at equal k (windows vs chunks) and at an equal chunk budget (plain k x 3 chunks
against k windows of 3 chunks), for two chunk sizes.

    python benchmarks/neighbor_context.py --tutorial tutorial
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path

from hyde_lc import NeighborExpandingRetriever, ingest_paths, open_store
from hyde_lc.cli import sample_files

QUESTIONS = Path(__file__).parents[1] / "hyde_lc" / "sample" / "questions.jsonl"
STOP = set(
    [
        "this",
        "that",
        "with",
        "from",
        "have",
        "been",
        "were",
        "what",
        "which",
        "their",
        "there",
        "about",
        "into",
        "they",
        "them",
        "than",
        "then",
        "when",
        "where",
        "also",
        "more",
        "most",
        "such",
        "other",
        "some",
        "these",
        "those",
        "only",
        "over",
    ]
)


def _norm(text: str) -> str:
    return text.lower().replace(",", "")


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in STOP}


def contexts(store, question: str, k: int, window: int | None) -> str:
    if window is None:
        docs = store.as_retriever(search_kwargs={"k": k}).invoke(question)
    else:
        docs = NeighborExpandingRetriever(
            base_retriever=store.as_retriever(), vectorstore=store, k=k, window=window
        ).invoke(question)
    return "\n".join(d.page_content for d in docs)


def evaluate(
    files: list[Path], items: list[tuple[str, object]], score, chunk: int, ks: list[int]
) -> list[dict]:
    store = open_store(tempfile.mkdtemp(prefix="hyde-nb-"))
    ingest_paths(files, store, chunk_size=chunk, chunk_overlap=chunk // 5, progress=False)
    rows = []
    for k in ks:
        for label, kk, window in (
            ("plain", k, None),
            ("expanded w=1", k, 1),
            ("plain, 3k chunks", 3 * k, None),
        ):
            values, chars = [], []
            for question, truth in items:
                text = contexts(store, question, kk, window)
                values.append(score(text, truth))
                chars.append(len(text))
            rows.append(
                {
                    "chunk_size": chunk,
                    "k": k,
                    "mode": label,
                    "score": sum(values) / len(values),
                    "context_chars": sum(chars) / len(chars),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tutorial", type=Path, help="folder with val.json and AI_Information.pdf")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--chunks", type=int, nargs="+", default=[400, 1000])
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results/neighbor_context.json")
    )
    args = parser.parse_args()

    sample = [json.loads(line) for line in QUESTIONS.read_text().splitlines()]
    sample_items = [(q["question"], q["keywords"]) for q in sample if q["page"]]
    results = {"sample": [], "tutorial": []}
    for chunk in args.chunks:
        results["sample"] += evaluate(
            sample_files(),
            sample_items,
            lambda text, kws: float(all(_norm(k) in _norm(text) for k in kws)),
            chunk,
            args.ks,
        )
        if args.tutorial:
            val = json.loads((args.tutorial / "val.json").read_text())
            items = [
                (q["question"], content_words(q["ideal_answer"])) for q in val if q["has_answer"]
            ]
            results["tutorial"] += evaluate(
                [args.tutorial / "AI_Information.pdf"],
                items,
                lambda text, words: len(words & content_words(text)) / max(1, len(words)),
                chunk,
                args.ks,
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    for name, rows in results.items():
        if not rows:
            continue
        metric = "answer in context" if name == "sample" else "ideal-answer word recall"
        print(f"\n{name}: {metric}\n| chunk size | k | mode | {metric} | context chars (mean) |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['chunk_size']} | {r['k']} | {r['mode']} | {r['score']:.2f} "
                f"| {r['context_chars']:.0f} |"
            )


if __name__ == "__main__":
    main()
