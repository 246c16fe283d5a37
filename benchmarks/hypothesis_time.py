"""Seconds per hypothesis for each local writer and token cap, interleaved question by question.

HyDE's cost is the hypothesis: everything else takes milliseconds. This times
`hyde_lc.hyde.hypotheses.write_hypotheses` (the retriever's path: prompt, llama.cpp, reasoning
strip) for each ``--writer`` x ``--max-tokens`` configuration on the same questions, the
configurations taking turns question by question (the order rotates) so machine load hits
them alike. Nothing is cached. Reported per configuration: median, mean and p95 seconds,
and the median length of the hypotheses in words.

    python -m benchmarks.hypothesis_time scifact --split train --questions 30 \\
        --writer local:qwen2.5-coder-1.5b local:qwen2.5-coder-0.5b --max-tokens 256 64 \\
        --out benchmarks/results/hypothesis_time.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from hyde_lc.bench.beir import load_beir
from hyde_lc.hyde.hypotheses import write_hypotheses
from hyde_lc.hyde.prompts import get_prompt
from hyde_lc.models.loading import load_llm


def write(llm: Any, prompt: str, question: str) -> str:
    """One hypothesis for ``question``, as the retriever writes it (no cache, no timeout)."""
    written = write_hypotheses(llm, [get_prompt(prompt).render(question)])
    return " ".join(written.texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path, help="BEIR folder (its queries are the questions)")
    parser.add_argument("--split", default="train")
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--writer", nargs="+", default=["local:qwen2.5-coder-1.5b"])
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[256])
    parser.add_argument("--prompt", default="generic")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    data = load_beir(args.data, split=args.split, limit=args.questions + 1)
    questions = list(data.queries.values())
    configs = list(itertools.product(args.writer, args.max_tokens))
    writers: dict[str, Any] = {}
    for writer, cap in configs:
        llm = load_llm(writer, role="hypothesis", max_tokens=cap)
        write(llm, args.prompt, questions[0])  # warm-up: weights loaded, engine started
        writers[f"{writer} max_tokens={cap}"] = llm
    seconds: dict[str, list[float]] = {name: [] for name in writers}
    words: dict[str, list[int]] = {name: [] for name in writers}
    names = list(writers)
    for i, question in enumerate(questions[1:]):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            start = time.perf_counter()
            text = write(writers[name], args.prompt, question)
            seconds[name].append(time.perf_counter() - start)
            words[name].append(len(text.split()))
        times = ", ".join(f"{seconds[n][-1]:.1f}s" for n in names)
        print(f"question {i + 1}: {times}", flush=True)
    rows = {
        name: {
            "median_s": round(statistics.median(values), 2),
            "mean_s": round(statistics.fmean(values), 2),
            "p95_s": round(float(np.percentile(values, 95)), 2),
            "median_words": statistics.median(words[name]),
            "questions": len(values),
        }
        for name, values in seconds.items()
    }
    lines = ["| writer | median s | mean s | p95 s | median words |", "|---|---|---|---|---|"]
    lines += [
        f"| {n} | {r['median_s']} | {r['mean_s']} | {r['p95_s']} | {r['median_words']} |"
        for n, r in rows.items()
    ]
    print("\n".join(lines))
    if args.out:
        meta = {
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "load_at_end": round(os.getloadavg()[0], 2),
            "dataset": f"{data.name} {args.split}",
            "prompt": args.prompt,
        }
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
