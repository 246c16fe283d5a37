"""Answer quality of the local answer model: repetition, refusals, keyword recall, first word.

Sets: ``sample`` and ``sample-zh`` (the bundled samples' question files: answerable
questions with keywords, and unanswerable ones) and ``tutorial`` (the tutorial set's
``val.json`` over ``AI_Information.pdf``: questions with ideal answers, some marked
unanswerable). Retrieval is the default hybrid search without hypotheses (k=4), so every
candidate is given the same passages; each question goes through
``build_answer_chain(...).stream(question)``. Per candidate and set:

* repeated 8-gram: share of answers in which a sequence of 8 words (characters, for
  Chinese) occurs twice; repeated sentence: share in which a sentence (citations removed)
  occurs twice;
* correct refusals: unanswerable questions answered with a refusal
  (`benchmarks.sample_qa.abstained`);
* keyword recall: on the samples, the share of answerable questions' keywords found in
  the answer; on the tutorial set, the share of the ideal answer's content words
  (`benchmarks.neighbor_context.content_words`) found in it; false refusals on answerable
  questions count as recall 0;
* first word: median seconds from ``stream`` to the first answer text (retrieval included).

Candidates (``--candidates``): ``today`` (the shipped settings), ``repeat1.1``
(llama.cpp ``repeat_penalty`` 1.1), ``freq0.3`` (``frequency_penalty`` 0.3), ``strict``
(a stricter refusal instruction in the answer prompt), ``ctx1280`` (a context budget: the
passages fitted to a 1,280-token window, answer room included, instead of the model's
4,096, so about two of the four retrieved passages are given), ``dry0.8`` (llama.cpp's
DRY sampler at its author's recommended strength, multiplier 0.8, over the whole context,
prompt included), ``dry0.8-last128`` (the same over the last 128 tokens only, so copying
the passages is not penalised once the answer is under way), ``unguarded`` (the model's
text as written: no stop at a repeated sentence, no cut to the last whole sentence at
the token cap; ``today`` has both). Each row records how the answer ended
(``answer_ending``: ``repeated_sentence``, ``token_cap`` or None).

    python -m benchmarks.answer_quality --tutorial path/to/tutorial \\
        --out benchmarks/results/answer_quality.json
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

import hyde_lc.answer as answer_module
from benchmarks.neighbor_context import content_words
from benchmarks.provenance import head_commit
from benchmarks.sample_qa import abstained
from hyde_lc import (
    HyDERetriever,
    build_answer_chain,
    ingest_paths,
    load_embeddings,
    load_llm,
    open_store,
    sample_files,
)
from hyde_lc.answer import reached_token_cap
from hyde_lc.core.sentences import AnswerGuard
from hyde_lc.ingest.samples import sample_questions

STRICT_REFUSAL = (
    " Answer only what the passages state. If they do not name the person, place, date or "
    "fact asked about, do not guess and do not name anything else: reply with that sentence "
    "alone."
)

CANDIDATES: dict[str, dict[str, Any]] = {
    "today": {},
    "unguarded": {"chain": {"guard": False}},
    "repeat1.1": {"llm": {"repeat_penalty": 1.1}},
    "freq0.3": {"llm": {"frequency_penalty": 0.3}},
    "strict": {"system_suffix": STRICT_REFUSAL},
    "ctx1280": {"chain": {"context_window": 1280}},
    "dry0.8": {"llm": {"dry_multiplier": 0.8}},
    "dry0.8-last128": {"llm": {"dry_multiplier": 0.8, "dry_penalty_last_n": 128}},
}


@contextmanager
def _system_suffix(suffix: str):
    """Append ``suffix`` to the answer prompt's system text while measuring.

    The prompt is module state in hyde_lc.answer; swapping it here keeps the candidate
    out of the product until it is chosen.
    """
    saved = answer_module._SYSTEM, answer_module.ANSWER_PROMPT
    answer_module._SYSTEM = saved[0] + suffix
    answer_module.ANSWER_PROMPT = answer_module._prompt(
        answer_module._SYSTEM.format(refusal=answer_module.NOT_ENOUGH_INFORMATION)
    )
    try:
        yield
    finally:
        answer_module._SYSTEM, answer_module.ANSWER_PROMPT = saved


class _Finish(BaseCallbackHandler):
    """The finish reason the answer model gave (``length``: it reached its token cap)."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                if message is not None:
                    self.reason = message.response_metadata.get("finish_reason", self.reason)


def replayed(row: dict, cap: int | None) -> dict:
    """An ``unguarded`` row's answer through the answer guard, as a ``guard-replay`` row.

    The answer model is greedy, so the guarded chain writes the same text up to where the
    guard ends it; the guard here sees that text and the model's finish reason, as it
    does for a remote model's output (a local model stops generating at the same place).
    """
    guard = AnswerGuard(cap)
    capped = reached_token_cap({"finish_reason": row.get("finish_reason")})
    answer = guard.feed(row["answer"]) + guard.finish(capped=capped)
    out = {**row, "candidate": "guard-replay", "answer": answer}
    out.update(first_word_s=None, total_s=None, answer_ending=guard.ending.reason)
    return out


def _scored(row: dict, keywords: list[str], words: bool) -> dict:
    """``row`` with its refusal, recall and repetition measures (from its answer)."""
    answer = row["answer"]
    refused = abstained(answer)
    recall = (0.0 if refused else _recall(answer, keywords, words)) if row["answerable"] else None
    return {
        **row,
        "refused": refused,
        "recall": recall,
        "repeated_8gram": repeated_ngram(answer),
        "repeated_sentence": repeated_sentence(answer),
    }


def _tokens(text: str) -> list[str]:
    """Words, and each CJK character as a word."""
    return re.findall(r"[\u3400-\u9fff]|[^\W\d_]+|\d+", text.lower())


def repeated_ngram(text: str, n: int = 8) -> bool:
    tokens = _tokens(text)
    grams = Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
    return any(c > 1 for c in grams.values())


def repeated_sentence(text: str) -> bool:
    text = re.sub(r"\[\d+(?:,\s*\d+)*\]", "", text)
    sentences = [" ".join(_tokens(s)) for s in re.split(r"[.!?。！？\n]+", text)]
    counts = Counter(s for s in sentences if len(s) >= 12)
    return any(c > 1 for c in counts.values())


def _sets(tutorial: Path | None, names: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, language, model in (
        ("sample", "en", "local:minilm"),
        ("sample-zh", "zh", "local:multilingual-e5-small"),
    ):
        if name not in names:
            continue
        lines = sample_questions(language).read_text(encoding="utf-8").splitlines()
        out[name] = {
            "files": sample_files(language),
            "embeddings": model,
            "questions": [
                {
                    "question": q["question"],
                    "answerable": q.get("page") is not None,
                    "keywords": q["keywords"],
                }
                for q in map(json.loads, filter(str.strip, lines))
            ],
        }
    if tutorial is not None and "tutorial" in names:
        items = json.loads((tutorial / "val.json").read_text())
        out["tutorial"] = {
            "files": [tutorial / "AI_Information.pdf"],
            "embeddings": "local:minilm",
            "questions": [
                {
                    "question": q["question"],
                    "answerable": q["has_answer"],
                    "keywords": sorted(content_words(q["ideal_answer"])),
                }
                for q in items
            ],
        }
    return out


def _recall(answer: str, keywords: list[str], words: bool) -> float:
    if not keywords:
        return 0.0
    if words:  # tutorial: content words of the ideal answer
        found = content_words(answer)
        return sum(k in found for k in keywords) / len(keywords)
    text = answer.lower().replace(",", "")
    return sum(k.lower().replace(",", "") in text for k in keywords) / len(keywords)


def run(
    sets: dict[str, dict[str, Any]],
    candidates: list[str],
    spec: str,
    k: int,
    log: Path,
    *,
    replay: bool = False,
    only: list[str] | None = None,
) -> list[dict]:
    """Answer every question per candidate; each row is also appended to ``log`` as made.

    With ``replay``, each ``unguarded`` row is followed by its `replayed` row; ``only``
    keeps the questions that contain one of its texts.
    """
    rows = []
    done = set()
    if log.exists():  # resume: rows already measured are kept, not measured again
        rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
        done = {(r["set"], r["candidate"], r["question"]) for r in rows}
    llms = {}
    for label in candidates:
        llms[label] = load_llm(spec, role="answer", **CANDIDATES[label].get("llm", {}))
        llms[label].invoke("Warm up.", max_tokens=1)
    for name, data in sets.items():
        store = open_store(
            tempfile.mkdtemp(prefix=f"hyde-aq-{name}-"),
            embeddings=load_embeddings(data["embeddings"]),
        )
        ingest_paths(data["files"], store, progress=False)
        retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=k)
        # Questions outside, candidates inside, unanswerable ones first: a run stopped
        # early has compared every candidate on the same questions, refusals included.
        for q in sorted(data["questions"], key=lambda q: q["answerable"]):
            if only and not any(text in q["question"] for text in only):
                continue
            for label in candidates:
                if (name, label, q["question"]) in done:
                    continue
                with _system_suffix(CANDIDATES[label].get("system_suffix", "")):
                    chain = build_answer_chain(
                        retriever, llms[label], **CANDIDATES[label].get("chain", {})
                    )
                    start = time.perf_counter()
                    first = None
                    parts = []
                    ending = None
                    finish = _Finish()
                    for chunk in chain.stream(q["question"], {"callbacks": [finish]}):
                        piece = chunk.get("answer", "")
                        if piece and first is None and piece.strip():
                            first = time.perf_counter() - start
                        parts.append(piece)
                        ending = chunk.get("answer_ending", ending)
                    made = [
                        {
                            "set": name,
                            "candidate": label,
                            "question": q["question"],
                            "answerable": q["answerable"],
                            "first_word_s": first,
                            "total_s": time.perf_counter() - start,
                            "answer": "".join(parts),
                            "answer_ending": ending,
                            "finish_reason": finish.reason,
                        }
                    ]
                    if replay and label == "unguarded":
                        made.append(replayed(made[0], llms[label].max_tokens))
                    for row in made:
                        r = _scored(row, q["keywords"], name == "tutorial")
                        rows.append(r)
                        with log.open("a", encoding="utf-8") as f:
                            f.write(json.dumps(r, ensure_ascii=False) + "\n")
                        total = r["total_s"] if r["total_s"] is not None else float("nan")
                        print(
                            f"{name} {r['candidate']:12} rep={r['repeated_8gram']:d} "
                            f"ref={r['refused']:d} end={r['answer_ending']} {total:5.1f}s "
                            f"{q['question'][:50]}",
                            flush=True,
                        )
    return rows


def replay_stored(
    paths: list[Path], spec: str, caps: list[int], log: Path, tutorial: Path | None
) -> list[dict]:
    """Stored ``today`` answers (written before the answer guard) cut at each token cap,
    as written (``unguarded@N``) and through the guard (``guarded@N``).

    The answer model is greedy: with a lower ``max_tokens`` it writes the same text up to
    the cap, so an answer's first N tokens (the model's own tokenizer) are what it writes
    under an N-token cap, and the guard then sees that text and a finish at the cap.
    """
    engine = load_llm(spec, role="answer")._engine()
    sets = {
        "sample": sample_questions("en"),
        "sample-zh": sample_questions("zh"),
    }
    keywords: dict[str, list[str]] = {}
    for path in sets.values():
        for q in map(json.loads, filter(str.strip, path.read_text("utf-8").splitlines())):
            keywords[q["question"]] = q["keywords"]
    if tutorial is not None:
        for q in json.loads((tutorial / "val.json").read_text()):
            keywords[q["question"]] = sorted(content_words(q["ideal_answer"]))
    rows = []
    for path in paths:
        for stored in map(json.loads, path.read_text("utf-8").splitlines()):
            if stored["candidate"] != "today":
                continue
            words = stored["set"] == "tutorial"  # keywords: the ideal answer's content words
            wanted = keywords.get(stored["question"])
            ids = engine.post("/tokenize", {"content": stored["answer"]})["tokens"]
            for cap in caps:
                capped = len(ids) >= cap
                text = stored["answer"]
                if capped:
                    text = engine.post("/detokenize", {"tokens": ids[:cap]})["content"]
                guard = AnswerGuard(cap)
                guarded = guard.feed(text) + guard.finish(capped=capped)
                for label, answer, ending in (
                    (f"unguarded@{cap}", text, None),
                    (f"guarded@{cap}", guarded, guard.ending.reason),
                ):
                    row = {
                        "set": stored["set"], "candidate": label, "question": stored["question"],
                        "answerable": stored["answerable"], "answer": answer,
                        "answer_ending": ending, "first_word_s": None, "total_s": None,
                    }  # fmt: skip
                    if wanted is None:  # keywords not at hand: keep the stored recall
                        row.update(refused=abstained(answer), recall=stored["recall"])
                        row.update(repeated_8gram=repeated_ngram(answer))
                        row.update(repeated_sentence=repeated_sentence(answer))
                    else:
                        row = _scored(row, wanted, words)
                    rows.append(row)
    log.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return rows


def _ended(rows: list[dict], reason: str) -> str:
    """How many answers ended for ``reason`` ("-": rows measured before it was recorded)."""
    if any("answer_ending" not in r for r in rows):
        return "-"
    return str(sum(r["answer_ending"] == reason for r in rows))


def table(rows: list[dict]) -> str:
    lines = [
        "| set | candidate | repeated 8-gram | repeated sentence | correct refusals "
        "| false refusals | keyword recall | ended (repeat / cap) | first word s (median) "
        "| answer s (median) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in dict.fromkeys((r["set"], r["candidate"]) for r in rows):
        group = [r for r in rows if (r["set"], r["candidate"]) == key]
        ans = [r for r in group if r["answerable"]]
        una = [r for r in group if not r["answerable"]]
        firsts = [r["first_word_s"] for r in group if r["first_word_s"] is not None]
        totals = [r["total_s"] for r in group if r.get("total_s") is not None]
        lines.append(
            f"| {key[0]} | {key[1]} | {sum(r['repeated_8gram'] for r in group)}/{len(group)} "
            f"| {sum(r['repeated_sentence'] for r in group)}/{len(group)} "
            f"| {sum(r['refused'] for r in una)}/{len(una)} "
            f"| {sum(r['refused'] for r in ans)}/{len(ans)} "
            f"| {statistics.mean(r['recall'] for r in ans) if ans else float('nan'):.2f} "
            f"| {_ended(group, 'repeated_sentence')} / {_ended(group, 'token_cap')} "
            f"| {statistics.median(firsts) if firsts else float('nan'):.1f} "
            f"| {statistics.median(totals) if totals else float('nan'):.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm", default="local:qwen2.5-coder-1.5b")
    parser.add_argument("--tutorial", type=Path, help="folder with val.json, AI_Information.pdf")
    parser.add_argument(
        "--sets", nargs="+", default=["sample", "sample-zh", "tutorial"],
        choices=["sample", "sample-zh", "tutorial"],
    )  # fmt: skip
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=CANDIDATES)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument(
        "--replay-guard", action="store_true",
        help="after each unguarded answer, a guard-replay row: that answer through the guard",
    )  # fmt: skip
    parser.add_argument("--only", nargs="+", help="only the questions containing these texts")
    parser.add_argument(
        "--replay-stored", nargs="+", type=Path, metavar="JSONL",
        help="no generation: the stored 'today' answers of these files, cut at each --caps",
    )  # fmt: skip
    parser.add_argument("--caps", nargs="+", type=int, default=[384, 128, 96])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/answer_quality.json"))
    parser.add_argument(
        "--report", action="store_true", help="print the table of the rows in --out's .jsonl"
    )
    args = parser.parse_args()
    if args.report:
        lines = args.out.with_suffix(".jsonl").read_text(encoding="utf-8").splitlines()
        print(table([json.loads(line) for line in lines]))
        return
    log = args.out.with_suffix(".jsonl")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.replay_stored:
        rows = replay_stored(args.replay_stored, args.llm, args.caps, log, args.tutorial)
        print(table(rows))
        return
    rows = run(
        _sets(args.tutorial, args.sets), args.candidates, args.llm, args.k, log,
        replay=args.replay_guard, only=args.only,
    )  # fmt: skip
    commit = head_commit()
    meta = {"date": date.today().isoformat(), "commit": commit, "llm": args.llm, "k": args.k}
    meta["machine"] = platform.machine()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, ensure_ascii=False))
    print(table(rows))


if __name__ == "__main__":
    main()
