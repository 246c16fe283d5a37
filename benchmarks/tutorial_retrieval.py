"""Dense, hybrid and HyDE retrieval on the small question sets: is the default worse anywhere?

Two sets without relevance judgements, measured by lexical proxies:

* ``tutorial`` (``shared/data/tutorial/val.json``, questions about ``AI_Information.pdf``
  with ideal answers): the share of the ideal answer's content words found in the k
  retrieved chunks (`benchmarks.neighbor_context.content_words`), over the answerable ones;
* ``sample`` and ``sample-zh`` (the bundled samples' question files, each answerable
  question with its page and keywords): whether every keyword is in the k chunks, and
  whether a chunk of the right page is among them. ``sample-zh`` is embedded with
  ``local:multilingual-e5-small``.

Configurations: dense (``lexical="off"``), hybrid (the default), dense HyDE and hybrid
HyDE (one hypothesis per question, shared by both HyDE rows through a hypothesis cache,
so they differ only in what they fuse). The cache file persists (``--hypothesis-cache``),
so a rerun writes nothing. ``--english-embeddings`` measures another English embedder.

    python -m benchmarks.tutorial_retrieval --tutorial tutorial \\
        --hypothesis-cache benchmarks/results/hypotheses/small-sets-qwen2.5-coder-0.5b.sqlite \\
        --out benchmarks/results/tutorial_retrieval_qwen0.5b.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.neighbor_context import content_words
from hyde_lc import (
    HyDERetriever,
    HypothesisCache,
    ingest_paths,
    load_embeddings,
    load_llm,
    open_store,
    sample_files,
)
from hyde_lc.ingest.samples import sample_questions
from hyde_lc.models.loading import resolve_llm_spec

CONFIGURATIONS: dict[str, dict[str, Any]] = {
    "dense": {"n_hypotheses": 0, "lexical": "off"},
    "hybrid (default)": {"n_hypotheses": 0},
    "dense HyDE": {"n_hypotheses": 1, "lexical": "off"},
    "hybrid HyDE": {"n_hypotheses": 1},
}


def _sets(tutorial: Path, english: str = "local:minilm") -> dict[str, dict[str, Any]]:
    """Each set: its document, its embedding model (``english`` for the English sets),
    and its answerable questions."""
    answerable = [q for q in json.loads((tutorial / "val.json").read_text()) if q["has_answer"]]
    out: dict[str, dict[str, Any]] = {
        "tutorial": {
            "files": [tutorial / "AI_Information.pdf"],
            "embeddings": english,
            "questions": [
                {"question": q["question"], "ideal": q["ideal_answer"]} for q in answerable
            ],
        }
    }
    for name, language, model in (
        ("sample", "en", english),
        ("sample-zh", "zh", "local:multilingual-e5-small"),
    ):
        lines = sample_questions(language).read_text(encoding="utf-8").splitlines()
        questions = [json.loads(line) for line in lines if line.strip()]
        out[name] = {
            "files": sample_files(language),
            "embeddings": model,
            "questions": [q for q in questions if q.get("page") is not None],
        }
    return out


def _score(question: dict[str, Any], docs: list[Any]) -> dict[str, float]:
    context = " ".join(d.page_content for d in docs)
    if "ideal" in question:
        wanted = content_words(question["ideal"])
        return {"answer_words": len(wanted & content_words(context)) / max(len(wanted), 1)}
    pages = {int(d.metadata.get("page", -1)) for d in docs}
    return {
        "keywords": float(all(k in context for k in question["keywords"])),
        "page": float(int(question["page"]) in pages),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tutorial", type=Path, default=Path("tutorial"))
    parser.add_argument("--llm", help="hypothesis writer (default: the package's)")
    parser.add_argument("--max-tokens", type=int, help="writer's cap (default: its own)")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--hypothesis-cache", type=Path, required=True)
    parser.add_argument("--sets", nargs="+", default=["tutorial", "sample", "sample-zh"])
    parser.add_argument(
        "--english-embeddings",
        default="local:minilm",
        help="embedding model of the English sets (tutorial, sample)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    caps = {} if args.max_tokens is None else {"max_tokens": args.max_tokens}
    writer = load_llm(args.llm, role="hypothesis", **caps)
    cache = HypothesisCache(args.hypothesis_cache)
    results: dict[str, Any] = {
        "k": args.k,
        "llm": resolve_llm_spec(args.llm, "hypothesis"),
        "max_tokens": writer.max_tokens,
        "sets": {},
    }
    for name, spec in _sets(args.tutorial, args.english_embeddings).items():
        if name not in args.sets:
            continue
        work = Path(tempfile.mkdtemp(prefix=f"hyde-{name}-"))
        store = open_store(work / "store", embeddings=load_embeddings(spec["embeddings"]))
        ingest_paths(spec["files"], store, progress=False)
        rows = {}
        for label, fields in CONFIGURATIONS.items():
            retriever = HyDERetriever(
                vectorstore=store,
                hypothesis_llm=writer if fields["n_hypotheses"] else None,
                k=args.k,
                hypothesis_cache=cache,
                timeout=None,
                **fields,
            )
            scores = [_score(q, retriever.invoke(q["question"])) for q in spec["questions"]]
            means = {m: round(sum(s[m] for s in scores) / len(scores), 3) for m in scores[0]}
            rows[label] = {"mean": means, "per_question": scores}
            print(f"{name} ({len(scores)} questions) {label}: {means}", flush=True)
        results["sets"][name] = {"embeddings": spec["embeddings"], "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
