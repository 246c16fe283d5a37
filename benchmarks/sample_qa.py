"""Answer quality and latency on the bundled sample's question set, per model and mode.

For each model (used as both hypothesis writer and answerer) and retrieval mode, every
question in hyde_lc/sample/questions.jsonl is retrieved (k chunks) and answered. Reports:
- page hit: the reference page is among the retrieved chunks' pages (answerable only);
- answer correct: every keyword of the question appears in the answer (answerable only);
- abstains: the answer says it lacks the information (unanswerable questions only);
- median hypothesis / answer / total seconds.

    python benchmarks/sample_qa.py --models local:qwen2.5-coder-1.5b local:smollm2-135m
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from datetime import date
from pathlib import Path

from hyde_lc import HyDERetriever, ingest_paths, load_llm, open_store
from hyde_lc.answer import answer_from_documents
from hyde_lc.core.language import says_not_enough_information
from hyde_lc.ingest.samples import sample_files, sample_questions

QUESTIONS = sample_questions("en")


def _norm(text: str) -> str:
    return text.lower().replace(",", "")


def answered(answer: str, keywords: list[str]) -> bool:
    return all(_norm(k) in _norm(answer) for k in keywords)


def abstained(answer: str) -> bool:
    if says_not_enough_information(answer):  # the fixed reply, in any language
        return True
    text = _norm(answer)
    return any(
        p in text
        for p in (
            "enough information",
            "not contain",
            "does not mention",
            "not mentioned",
            "no information",
        )
    )


def run(models: list[str], modes: list[str], k: int) -> list[dict]:
    questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines()]
    store = open_store(tempfile.mkdtemp(prefix="hyde-qa-"))
    ingest_paths(sample_files(), store, progress=False)
    rows = []
    for spec in models:
        writer = load_llm(spec, role="hypothesis")
        answerer = load_llm(spec, role="answer")
        writer.invoke("Warm up.", max_tokens=1)  # load the weights outside the timings
        for mode in modes:
            retriever = HyDERetriever(
                vectorstore=store,
                hypothesis_llm=writer,
                k=k,
                n_hypotheses=0 if mode == "standard" else 1,
            )
            for q in questions:
                start = time.perf_counter()
                result = retriever.retrieve_with_details(q["question"])
                t_answer = time.perf_counter()
                answer = answer_from_documents(answerer).invoke(
                    {"question": q["question"], "documents": result.documents}
                )
                end = time.perf_counter()
                pages = {
                    p
                    for d in result.documents
                    for p in range(d.metadata["page"], d.metadata["page_end"] + 1)
                }
                rows.append(
                    {
                        "model": spec,
                        "mode": mode,
                        "question": q["question"],
                        "answerable": q["page"] is not None,
                        "page_hit": q["page"] in pages if q["page"] else None,
                        "correct": answered(answer, q["keywords"]) if q["page"] else None,
                        "abstained": abstained(answer),
                        "hypothesis_s": result.timings["hypothesis_s"],
                        "answer_s": end - t_answer,
                        "total_s": end - start,
                        "answer": answer,
                        "hypotheses": result.hypotheses,
                    }
                )
                print(
                    f"{spec} {mode:8} {rows[-1]['correct']!s:5} {end - start:5.1f}s "
                    f"{q['question'][:60]}",
                    flush=True,
                )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| model | mode | page hit | answer correct | abstains when unanswerable "
        "| hypothesis s (median) | answer s (median) | total s (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((r["model"], r["mode"]) for r in rows)
    for model, mode in keys:
        group = [r for r in rows if (r["model"], r["mode"]) == (model, mode)]
        ans = [r for r in group if r["answerable"]]
        una = [r for r in group if not r["answerable"]]
        med = {
            key: statistics.median(r[key] for r in group)
            for key in ("hypothesis_s", "answer_s", "total_s")
        }
        lines.append(
            f"| {model} | {mode} | {sum(r['page_hit'] for r in ans)}/{len(ans)} "
            f"| {sum(r['correct'] for r in ans)}/{len(ans)} "
            f"| {sum(r['abstained'] for r in una)}/{len(una)} "
            f"| {med['hypothesis_s']:.1f} | {med['answer_s']:.1f} | {med['total_s']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["local:qwen2.5-coder-1.5b"])
    parser.add_argument(
        "--modes", nargs="+", default=["standard", "hyde"], choices=["standard", "hyde"]
    )
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/sample_qa.json"))
    args = parser.parse_args()
    rows = run(args.models, args.modes, args.k)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": date.today().isoformat(),
        "machine": platform.machine(),
        "cores": __import__("os").cpu_count(),
        "k": args.k,
    }
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
