"""Is HyDE's default worse than standard retrieval on the tutorial question set?

The tutorial set (``shared/data/tutorial/val.json``: questions about
``AI_Information.pdf`` with ideal answers) has no relevance judgements, so the measure is
the lexical proxy of `benchmarks/neighbor_context.py`: the share of the ideal answer's
content words found in the k retrieved chunks, averaged over the answerable questions.
Modes: standard, HyDE with the default fusion (mean, query weight 0.8) and with the
paper's equal weighting; both HyDE modes use the same hypotheses (one per question,
sampled at temperature 0.7, cached), so they differ only in fusion.

    python benchmarks/tutorial_retrieval.py --tutorial ../shared/data/tutorial
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from langchain_community.cache import SQLiteCache

from benchmarks.neighbor_context import content_words
from hyde_lc import HyDERetriever, ingest_paths, load_llm, open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tutorial", type=Path, default=Path("../shared/data/tutorial"))
    parser.add_argument("--llm", default="local:qwen2.5-coder-1.5b")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    questions = [q for q in json.loads((args.tutorial / "val.json").read_text()) if q["has_answer"]]
    work = Path(tempfile.mkdtemp(prefix="hyde-tutorial-"))
    store = open_store(work / "store")
    ingest_paths([args.tutorial / "AI_Information.pdf"], store, progress=False)
    writer = load_llm(args.llm, role="hypothesis")
    cache = SQLiteCache(str(work / "hypotheses.sqlite"))
    modes = {
        "standard": {"n_hypotheses": 0},
        "hyde default (mean, query weight 0.8)": {},
        "hyde paper mean (equal weights)": {"query_weight": None},
    }
    rows = []
    for name, options in modes.items():
        retriever = HyDERetriever(
            vectorstore=store,
            hypothesis_llm=writer,
            k=args.k,
            hypothesis_cache=cache,
            timeout=None,
            **options,
        )
        recalls = []
        for q in questions:
            context = " ".join(d.page_content for d in retriever.invoke(q["question"]))
            wanted = content_words(q["ideal_answer"])
            recalls.append(len(wanted & content_words(context)) / max(len(wanted), 1))
        rows.append({"mode": name, "recall": round(sum(recalls) / len(recalls), 3),
                     "per_question": [round(r, 3) for r in recalls]})  # fmt: skip
        print(f"{name}: {rows[-1]['recall']}")
    if args.out:
        args.out.write_text(json.dumps({"k": args.k, "llm": args.llm, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
