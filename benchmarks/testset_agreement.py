"""How far can a synthetic test set be trusted? Synthetic questions against real labels.

On a labelled BEIR set (SciFact test, CMRC 2018), a synthetic test set is made from the
corpus alone (`hyde_lc.evaluation.testset.make_testset`: every corpus document is one
chunk, its own source; the specificity check searches the same exact dense index the
configurations use), then the configurations `hyde-lc tune` runs are measured on the real
queries and on the synthetic ones (`hyde_lc.bench.tune`), over the same index:

- Kendall's tau between the two rankings of the configurations (by nDCG@10);
- regret: the real nDCG@10 of the configuration recommended on the synthetic set minus
  the best real nDCG@10;
- BM25's advantage (BM25 nDCG@10 minus dense) on real questions, on the synthetic set
  before the checks (every parsed first draft, dropped ones included) and after;
- the writing time per kept question.

``rephrase`` makes the same set again with a rephraser (`make_testset(rephraser=...)`):
the writer is greedy, so its drafts would be the ones already made; they are replayed from
the set's files (no writer runs), and only the rephraser, the checks and the specificity
search run. ``compare`` with ``--writer <writer>+<rephraser tag>`` reads that set.

Usage:
    python benchmarks/testset_agreement.py make scifact --n 100 --writer local:qwen2.5-coder-0.5b
    python benchmarks/testset_agreement.py compare scifact --writer local:qwen2.5-coder-0.5b
    python benchmarks/testset_agreement.py rephrase scifact --rephraser local:qwen2.5-coder-1.5b
    python benchmarks/testset_agreement.py compare scifact \
        --writer local:qwen2.5-coder-0.5b+qwen2.5-coder-1.5b

"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import time
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from hyde_lc.bench.beir import BeirDataset, load_beir
from hyde_lc.bench.retrieval import corpus_index, corpus_lexical
from hyde_lc.bench.tune import TUNE_CONFIGS, by_name, tune
from hyde_lc.evaluation.question_checks import word_overlap
from hyde_lc.evaluation.question_writer import default_rephraser, default_writer
from hyde_lc.evaluation.runs import Question
from hyde_lc.evaluation.testset import (
    ChunkSource,
    make_testset,
    read_testset,
    rejected_path,
)
from hyde_lc.hyde.hypothesis_cache import HypothesisCache
from hyde_lc.models.loading import load_embeddings, load_llm
from hyde_lc.models.weights import cache_dir

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results" / "testset"
SETS = {
    "scifact": {"folder": "scifact", "embeddings": "local:minilm"},
    "cmrc": {"folder": "cmrc2018_zh", "embeddings": "local:multilingual-e5-small"},
}


def commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()


def stamped(report: dict[str, Any], command: str) -> dict[str, Any]:
    """``report`` with the command that made it, the date, the commit and the machine."""
    return {
        **report,
        "command": f"python benchmarks/testset_agreement.py {command}",
        "date": date.today().isoformat(),
        "commit": commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
    }


def writer_tag(spec: str) -> str:
    return spec.split(":", 1)[-1].replace("/", "_")


def dataset(name: str) -> BeirDataset:
    return load_beir(DATA / SETS[name]["folder"], split="test")


def chunk_source(name: str, data: BeirDataset) -> tuple[ChunkSource, Any]:
    """Every corpus document as one chunk (its own source), searched by the exact index."""
    index = corpus_index(data, load_embeddings(SETS[name]["embeddings"]))
    chunks = [Document(text, id=doc_id, metadata={"source": doc_id}) for doc_id, text in
              data.corpus.items()]  # fmt: skip

    def search(question: str, k: int) -> list[Document]:
        return index.similarity_search(question, k=k)

    return ChunkSource(data.name, chunks, search), index


def testset_path(name: str, spec: str, seed: int = 0) -> Path:
    """The set of ``spec`` (a writer, or ``writer+rephraser tag``) on ``name``."""
    return OUT / f"{name}-{writer_tag(spec)}{f'-seed{seed}' if seed else ''}.jsonl"


def made_by(args: argparse.Namespace) -> str:
    """The writer, and the rephraser if any, as one spec for `testset_path`."""
    if args.rephraser == "none":
        return str(args.writer)
    return f"{args.writer}+{writer_tag(args.rephraser)}"


def cmd_time(args: argparse.Namespace) -> None:
    """What making a set took so far (for a writer timed on a few questions only)."""
    out = testset_path(args.set, args.writer)
    report = {
        "set": args.set,
        "writer": args.writer,
        "making": making(out),
    }
    report = stamped(
        report,
        f"make {args.set} --n N --writer {args.writer}",
    )
    out.with_suffix(".time.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


def cmd_make(args: argparse.Namespace) -> None:
    data = dataset(args.set)
    source, _ = chunk_source(args.set, data)
    out = testset_path(args.set, made_by(args), args.seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    writer = default_writer(args.writer)
    rephraser = None if args.rephraser == "none" else default_rephraser(args.rephraser)
    summary = make_testset(
        source,
        out,
        n=args.n,
        writer=writer,
        rephraser=rephraser,
        seed=args.seed,
        max_drafts=args.max_drafts,
    )
    report = {
        "set": args.set,
        "writer": args.writer,
        "rephraser": args.rephraser,
        "seed": args.seed,
        "n": args.n,
        "kept": summary.kept,
        "rejected": summary.rejected,
        "writer_calls": summary.writer_calls,
        "writing_seconds": round(summary.seconds, 1),
        "seconds_per_kept_question": summary.seconds_per_question,
        "this_call_wall_seconds": round(time.perf_counter() - started, 1),
    }
    report = stamped(
        report,
        f"make {args.set} --n {args.n} --writer {args.writer} --rephraser {args.rephraser}"
        + (f" --seed {args.seed}" if args.seed else ""),
    )
    (out.with_suffix(".make.json")).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


class Replay(BaseChatModel):
    """The writer of a set already made, replayed: each chunk's first reply as recorded."""

    replies: dict[str, str]
    """The first 100 characters of a chunk -> the writer's first reply on it."""
    model_name: str

    @property
    def _llm_type(self) -> str:
        return "replay"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:  # fmt: skip
        prompt = str(messages[-1].content)
        for head, reply in self.replies.items():
            if head in prompt:
                return ChatResult(generations=[ChatGeneration(message=AIMessage(reply))])
        raise RuntimeError("a chunk the recorded set never drafted on: not the same order")


def first_drafts(out: Path) -> list[tuple[str, str | None, str | None]]:
    """(chunk id, the writer's first question, its answer) of every draft, kept then dropped.

    The question and answer are None where the writer's reply did not parse.
    """
    kept = [
        (r["reference_context_ids"][0], r["testset"]["first_draft"] or r["question"],
         r["reference"])
        for r in _rows(out)
    ]  # fmt: skip
    dropped = [
        (r["chunk_id"], r.get("first_draft") or r.get("question"), r.get("reference"))
        for r in _rows(rejected_path(out))
    ]
    return kept + dropped


def recorded_drafts(out: Path, data: BeirDataset) -> dict[str, str]:
    """Chunk head -> the first reply the writer gave on it, from the set and its drops."""
    replies = {
        chunk: f"Question: {first}\nAnswer: {answer}" if first and answer else ""
        for chunk, first, answer in first_drafts(out)
    }
    return {data.corpus[chunk][:100]: reply for chunk, reply in replies.items()}


def _rows(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a set or of its dropped drafts (none when the file is missing)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cmd_rephrase(args: argparse.Namespace) -> None:
    data = dataset(args.set)
    source, _ = chunk_source(args.set, data)
    base = testset_path(args.set, args.writer, args.seed)
    replies = recorded_drafts(base, data)
    out = testset_path(args.set, made_by(args), args.seed)
    started = time.perf_counter()
    summary = make_testset(
        source,
        out,
        n=len(replies),
        writer=Replay(replies=replies, model_name=writer_tag(args.writer)),
        rephraser=default_rephraser(args.rephraser),
        seed=args.seed,
        max_drafts=len(replies),
    )
    report = {
        "set": args.set,
        "writer": f"{args.writer} (its drafts replayed from {base.name})",
        "rephraser": args.rephraser,
        "drafts": len(replies),
        "kept": summary.kept,
        "rejected": summary.rejected,
        "rephraser_calls": summary.writer_calls - (summary.kept + sum(summary.rejected.values())),
        "rephrasing_seconds": round(summary.seconds, 1),
        "this_call_wall_seconds": round(time.perf_counter() - started, 1),
    }
    report = stamped(
        report,
        f"rephrase {args.set} --writer {args.writer} --rephraser {args.rephraser}",
    )
    out.with_suffix(".make.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


def real_questions(data: BeirDataset) -> list[Question]:
    """The labelled queries as questions whose reference chunks are their relevant documents."""
    return [
        Question(text, reference_context_ids=sorted(d for d, rel in data.qrels[q].items() if rel),
                 key=q)
        for q, text in data.queries.items()
    ]  # fmt: skip


def draft_questions(out: Path) -> list[Question]:
    """Every parsed first draft (kept or dropped), on its chunk: the set before the checks."""
    drafts = [(text, chunk) for chunk, text, _ in first_drafts(out) if text]
    return [Question(t, reference_context_ids=[c], key=f"d{i}") for i, (t, c) in
            enumerate(drafts)]  # fmt: skip


def making(out: Path) -> dict[str, Any]:
    """What writing the set took, from its own lines (kept and dropped drafts)."""
    kept, dropped = _rows(out), _rows(rejected_path(out))
    seconds = sum(r["testset"]["seconds"] for r in kept) + sum(r["seconds"] for r in dropped)
    calls = sum(r["testset"]["writer_calls"] for r in kept) + sum(
        r["writer_calls"] for r in dropped
    )
    rewritten = [r for r in kept if r["testset"]["first_draft"]]
    return {
        "kept": len(kept),
        "drafts": len(kept) + len(dropped),
        "dropped": dict(Counter(r["reason"] for r in dropped)),
        "rewrites_kept": len(rewritten),
        "rewrites_identical_to_draft": sum(
            1 for r in dropped if r.get("first_draft") and r["first_draft"] == r["question"]
        ),
        "writer_calls": calls,
        "writing_seconds": round(seconds, 1),
        "seconds_per_kept_question": round(seconds / len(kept), 1) if kept else None,
        "seconds_per_writer_call": round(seconds / calls, 1) if calls else None,
        "extrapolated_seconds_for_100": round(100 * seconds / len(kept)) if kept else None,
    }


def mean_overlap(questions: list[Question], data: BeirDataset) -> float:
    return statistics.fmean(
        word_overlap(q.question, data.corpus[(q.reference_context_ids or [""])[0]])
        for q in questions
    )


def ndcg(report: Any) -> dict[str, float]:
    return {r.config.name: r.mean("nDCG@10") for r in report.rows}


def without_per_question(report: dict[str, Any]) -> dict[str, Any]:
    rows = [{k: v for k, v in r.items() if k != "per_question"} for r in report["rows"]]
    return {**report, "rows": rows}


def cmd_compare(args: argparse.Namespace) -> None:
    from scipy.stats import kendalltau

    data = dataset(args.set)
    _, index = chunk_source(args.set, data)
    lexical = corpus_lexical(index, data)
    llm = load_llm(args.hypothesis_llm, role="hypothesis", max_tokens=args.max_tokens)
    # The committed cache holds the real queries' hypotheses; the synthetic questions' are
    # added to a copy in the cache folder, so the committed file stays as it is.
    copy = cache_dir() / "bench" / f"testset-{args.set}-{Path(args.hypothesis_cache).name}"
    if not copy.is_file():
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(args.hypothesis_cache, copy)
    cache = HypothesisCache(copy)
    out = testset_path(args.set, args.writer, args.seed)
    synthetic = read_testset(out)
    started = time.perf_counter()
    common = {"llm": llm, "lexical": lexical, "hypothesis_cache": cache, "windows": ()}
    real = tune(real_questions(data), index, **common)
    after = tune(synthetic, index, **common)
    cheap = [by_name("dense"), by_name("bm25")]
    before_questions = draft_questions(out)
    before = tune(before_questions, index, configs=cheap, **common)
    real_ndcg, after_ndcg, before_ndcg = ndcg(real), ndcg(after), ndcg(before)
    names = [c.name for c in TUNE_CONFIGS]
    tau = kendalltau([real_ndcg[n] for n in names], [after_ndcg[n] for n in names])
    chosen = after.recommendation.name
    report = {
        "set": args.set,
        "writer": args.writer,
        "hypothesis_llm": args.hypothesis_llm,
        "embeddings": SETS[args.set]["embeddings"],
        "corpus": len(data.corpus),
        "real_questions": len(data.queries),
        "synthetic_questions": len(synthetic),
        "drafts_before_checks": len(before_questions),
        "real_ndcg10": real_ndcg,
        "synthetic_ndcg10": after_ndcg,
        "kendall_tau": tau.statistic,
        "kendall_p": tau.pvalue,
        "recommended_on_synthetic": chosen,
        "recommended_on_real": real.recommendation.name,
        "regret_points": 100 * (real_ndcg[chosen] - max(real_ndcg.values())),
        "bm25_advantage_points": {
            "real": 100 * (real_ndcg["bm25"] - real_ndcg["dense"]),
            "synthetic_before_checks": 100 * (before_ndcg["bm25"] - before_ndcg["dense"]),
            "synthetic_after_checks": 100 * (after_ndcg["bm25"] - after_ndcg["dense"]),
        },
        "bm25_advantage_by_overlap": after.lead.to_json() if after.lead else None,
        "word_overlap": {
            "real": mean_overlap(real_questions(data), data),
            "synthetic_before_checks": mean_overlap(before_questions, data),
            "synthetic_after_checks": mean_overlap(synthetic, data),
        },
        "synthetic_tune": after.to_json(),
        "real_tune": without_per_question(real.to_json()),
        "making": making(out),
        "seconds": round(time.perf_counter() - started, 1),
    }
    report = stamped(
        report,
        f"compare {args.set} --writer {args.writer}"
        + (f" --seed {args.seed}" if args.seed else ""),
    )
    path = out.with_name(out.stem + "-compare.json")
    path.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(real.markdown(), after.markdown(), after.choice(), sep="\n\n")
    print(json.dumps({k: v for k, v in report.items() if not k.endswith("_tune")}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one_set = argparse.ArgumentParser(add_help=False)  # what names a set's files
    one_set.add_argument("set", choices=sorted(SETS))
    one_set.add_argument("--writer", default="local:qwen2.5-coder-0.5b")
    seeded = argparse.ArgumentParser(add_help=False, parents=[one_set])
    seeded.add_argument("--seed", type=int, default=0, help="which chunks (default 0)")
    make = sub.add_parser("make", parents=[seeded], help="make (or resume) the synthetic set")
    make.add_argument("--n", type=int, default=100)
    make.add_argument("--rephraser", default="none", help="a model spec, or none (default)")
    make.add_argument("--max-drafts", type=int, default=None)
    make.set_defaults(func=cmd_make)
    timing = sub.add_parser("time", parents=[one_set], help="what making a set took so far")
    timing.set_defaults(func=cmd_time)
    rephrase = sub.add_parser("rephrase", parents=[seeded], help="the same set, rephrased")
    rephrase.add_argument("--rephraser", default="local:qwen2.5-coder-1.5b")
    rephrase.set_defaults(func=cmd_rephrase)
    compare = sub.add_parser(
        "compare", parents=[seeded], help="synthetic against real over the configurations"
    )
    compare.add_argument("--hypothesis-llm", default="local:qwen2.5-coder-0.5b")
    compare.add_argument("--max-tokens", type=int, default=64)
    compare.add_argument(
        "--hypothesis-cache",
        default=str(ROOT / "benchmarks/results/hypotheses/scifact-qwen2.5-coder-0.5b.sqlite"),
    )
    compare.set_defaults(func=cmd_compare)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
