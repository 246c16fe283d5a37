"""Which configuration to use on your documents: measured on a test set, and chosen by a rule.

`tune` runs the configurations that matter (`TUNE_CONFIGS`: dense, BM25, hybrid, hybrid
HyDE, dense HyDE) on a test set (`hyde_lc.evaluation.testset`, or any question file with
``reference_context_ids``) through `hyde_lc.bench.retrieval` (the bench's runner, metrics
and paired bootstrap), scores each ranking by chunk id (hit@1, hit@5, MRR@10, nDCG@10),
compares every configuration with the current default (``hybrid``: what `HyDERetriever`
does without a hypothesis model) by a paired bootstrap over questions, costs each (LLM
calls and seconds per question), and recommends one (`recommend`): **the cheapest
configuration that no other beats on nDCG@10 with a 95% interval above 0**. The choice
is printed as the `HyDERetriever` keyword arguments and the ``hyde-lc`` flags that select
it. With a collection of hyde_lc chunks, `answer_windows` then measures neighbour windows
around the chosen configuration's hits: how often the answer context holds a reference
chunk, and its size.

Seconds per question are measured on the machine that runs `tune`: each configuration's
search time (hypotheses read from a cache all configurations share), plus, for HyDE, its
hypotheses per question times the mean seconds a hypothesis took to write.

Questions written on a chunk share its words, and that favours BM25 (`LexicalLead`): on a
test set from `hyde_lc.evaluation.testset`, the report shows BM25's lead over dense
search in the half of the questions that copy least from their chunk beside the half that
copies most, so a user can see how much of the lead is the set's and not the retrieval's.

Example:
    >>> from hyde_lc import open_store
    >>> from hyde_lc.bench.tune import tune
    >>> report = tune("my_questions.jsonl", open_store())  # doctest: +SKIP
    >>> print(report.markdown())  # doctest: +SKIP
    >>> report.recommendation.name  # doctest: +SKIP
    'hybrid'

"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Literal

from langchain_core.vectorstores import VectorStore

from hyde_lc.bench.beir import BeirDataset
from hyde_lc.bench.retrieval import (
    BM25,
    HYBRID,
    STANDARD,
    BenchMode,
    ModeResult,
    paired_bootstrap,
    per_query_measures,
    run_modes,
)
from hyde_lc.errors import HydeLcError, MissingDependencyError
from hyde_lc.search.lexical import LexicalSearch

MEASURES = ("Success@1", "Success@5", "RR@10", "nDCG@10")
"""What each ranking is scored by (ir-measures' names), by reference chunk id."""
SHOWN = {"Success@1": "hit@1", "Success@5": "hit@5", "RR@10": "MRR@10", "nDCG@10": "nDCG@10"}
PRIMARY = "nDCG@10"
"""The measure the recommendation rule compares."""


@dataclass(frozen=True)
class TuneConfig:
    """A configuration `tune` measures: the bench's `BenchMode`, and how a user selects it.

    Example:
        >>> by_name("dense-hyde").flags
        '--mode hyde --lexical off'

    """

    name: str
    mode: BenchMode
    kwargs: str
    """The `HyDERetriever` keyword arguments that select it (beside ``vectorstore=store``)."""
    flags: str
    """The ``hyde-lc ask`` / ``evaluate`` flags that select it ("" where none do)."""

    @property
    def llm_calls(self) -> int:
        """Hypothesis-writer calls per question."""
        return self.mode.n_hypotheses


TUNE_CONFIGS = (
    TuneConfig("dense", STANDARD, 'lexical="off"', "--mode standard --lexical off"),
    TuneConfig("bm25", BM25, 'dense_weight=0.0, hybrid_fusion="rrf"', ""),
    TuneConfig("hybrid", HYBRID, "(the defaults)", "--mode standard"),
    TuneConfig(
        "hybrid-hyde",
        BenchMode({"n_hypotheses": 1}),
        'hypothesis_llm=load_llm(role="hypothesis")',
        "--mode hyde",
    ),
    TuneConfig(
        "dense-hyde",
        BenchMode({"n_hypotheses": 1, "lexical": "off"}),
        'hypothesis_llm=load_llm(role="hypothesis"), lexical="off"',
        "--mode hyde --lexical off",
    ),
)
"""The configurations that matter, cheapest first; ``hybrid`` is the current default."""
REFERENCE = "hybrid"
"""The current default every configuration is compared with."""


def by_name(name: str) -> TuneConfig:
    """The configuration of `TUNE_CONFIGS` called ``name``."""
    for config in TUNE_CONFIGS:
        if config.name == name:
            return config
    raise HydeLcError(
        f"unknown configuration {name!r}: choose from {', '.join(c.name for c in TUNE_CONFIGS)}"
    )


# -- the rule -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Recommendation:
    """The configuration the rule chose, and why the cheaper ones were not."""

    name: str
    beaten: dict[str, str]
    """Configuration -> one that beats it with a 95% interval above 0."""
    candidates: list[str]
    """The configurations nothing beats, cheapest first (the first is the choice)."""
    order: list[str] = field(default_factory=list)
    """Every configuration, cheapest first."""

    def reason(self) -> str:
        """One sentence: why this one."""
        cheaper = self.order[: self.order.index(self.name)] if self.name in self.order else []
        if not cheaper:
            return f"{self.name}: the cheapest configuration, and no other beats it"
        lost = ", ".join(f"{c} (beaten by {self.beaten[c]})" for c in cheaper)
        return f"{self.name}: no other beats it, and every cheaper one is beaten: {lost}"


def recommend(
    scores: Mapping[str, Mapping[str, float]],
    costs: Mapping[str, tuple[float, float]],
    resamples: int = 5000,
) -> Recommendation:
    """The cheapest configuration that no other beats with a 95% interval above 0.

    ``scores``: configuration -> question -> score (every configuration on the same
    questions); ``costs``: configuration -> (LLM calls, seconds) per question, compared in
    that order, seconds in whole seconds (searches without an LLM take milliseconds, and
    which is faster by a few of them is timing noise); on a tie the current default
    (`REFERENCE`) goes first, then names in order. "Beats": the paired bootstrap interval
    (`hyde_lc.bench.retrieval.paired_bootstrap`) of the other's score minus this one's
    lies above 0.

    Example:
        >>> scores = {"cheap": {"a": 0.0, "b": 0.0, "c": 0.0},
        ...           "dear": {"a": 1.0, "b": 1.0, "c": 1.0}}
        >>> recommend(scores, {"cheap": (0, 0.1), "dear": (1, 2.0)}).name
        'dear'

    """
    names = sorted(scores, key=lambda n: (costs[n][0], math.floor(costs[n][1]), n != REFERENCE, n))
    if not names:
        raise HydeLcError("no configuration to choose from")
    questions = sorted(scores[names[0]])
    beaten: dict[str, str] = {}
    for name in names:
        mine = [scores[name][q] for q in questions]
        for other in names:
            if other == name:
                continue
            _, (low, _high) = paired_bootstrap(
                mine, [scores[other][q] for q in questions], resamples
            )
            if low > 0:
                beaten[name] = other
                break
    candidates = [n for n in names if n not in beaten]
    return Recommendation(candidates[0], beaten, candidates, names)


# -- the set's bias toward BM25 --------------------------------------------------------------


@dataclass(frozen=True)
class LexicalLead:
    """BM25's lead over dense search, in the halves of a test set split by word overlap.

    A question written on a chunk shares its words (``overlap``: the share of its search
    terms the chunk holds, stored by `hyde_lc.evaluation.testset`), and shared words are
    what BM25 matches. The half that copies least is the nearer to the questions users
    write, so its lead is the one to trust; a lead that grows with overlap (by 2 points or
    more between the halves) is the set's, and `sentence` says so.

    Example:
        >>> lead = LexicalLead(8.1, (41, 0.66, 4.0), (42, 0.85, 12.1))
        >>> lead.sentence().split(";")[0]
        "BM25's lead over dense on nDCG@10: +8.1 points over all questions"

    """

    overall: float
    """BM25 minus dense nDCG@10 over every question (points)."""
    low: tuple[int, float, float]
    """The half that copies least: (questions, mean overlap, lead in points)."""
    high: tuple[int, float, float]
    """The half that copies most: (questions, mean overlap, lead in points)."""

    def sentence(self) -> str:
        """What the lead says, in one paragraph."""
        (_, low_overlap, low_lead), (_, high_overlap, high_lead) = self.low, self.high
        text = (
            f"BM25's lead over dense on nDCG@10: {self.overall:+.1f} points over all questions; "
            f"{low_lead:+.1f} over the half whose terms their chunk holds least (overlap "
            f"{low_overlap:.2f}), {high_lead:+.1f} over the half it holds most "
            f"({high_overlap:.2f})."
        )
        if high_lead - low_lead >= 2.0:
            text += (
                " The lead grows with the words a question copies from its chunk: on "
                "questions written without the chunk in front of them, expect it nearer "
                "the lower figure."
            )
        return text

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        halves = {"low_overlap_half": self.low, "high_overlap_half": self.high}
        return {
            "bm25_lead_points": self.overall,
            **{
                name: {"questions": n, "mean_overlap": overlap, "bm25_lead_points": lead}
                for name, (n, overlap, lead) in halves.items()
            },
        }


def lexical_lead(
    bm25: Mapping[str, float], dense: Mapping[str, float], overlap: Mapping[str, float]
) -> LexicalLead | None:
    """BM25's lead over dense (question -> nDCG@10 each) by halves of ``overlap``.

    None when fewer than 4 questions carry an overlap (a half of one says nothing).
    """
    keys = sorted((k for k in overlap if k in bm25 and k in dense), key=lambda k: (overlap[k], k))
    if len(keys) < 4:
        return None

    def half(part: list[str]) -> tuple[int, float, float]:
        lead = 100 * statistics.fmean(bm25[k] - dense[k] for k in part)
        return len(part), statistics.fmean(overlap[k] for k in part), lead

    middle = len(keys) // 2
    overall = 100 * statistics.fmean(bm25[k] - dense[k] for k in keys)
    return LexicalLead(overall, half(keys[:middle]), half(keys[middle:]))


# -- running it ---------------------------------------------------------------------------


@dataclass
class TuneRow:
    """One configuration's scores, interval against the default, and cost."""

    config: TuneConfig
    result: ModeResult
    scores: dict[str, dict[str, float]]
    """Measure -> question -> score."""
    llm_seconds: float | None
    """Mean seconds per hypothesis-writer call (None without an LLM)."""
    vs_default: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Measure -> {"delta", "ci"} against `REFERENCE` (empty for the reference itself)."""

    def mean(self, measure: str) -> float:
        """The mean of ``measure`` over the questions."""
        return statistics.fmean(self.scores[measure].values())

    @property
    def search_seconds(self) -> float:
        """Mean seconds per question of the search itself (hypotheses written excluded)."""
        took = self.result.query_seconds
        return statistics.fmean(took[q] - self.result.written.get(q, 0.0) for q in took)

    @property
    def seconds(self) -> float:
        """Seconds per question: the search, plus writing its hypotheses."""
        return self.search_seconds + self.config.llm_calls * (self.llm_seconds or 0.0)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (per-question scores included)."""
        return {
            "name": self.config.name,
            "label": self.config.mode.label,
            "kwargs": self.config.kwargs,
            "flags": self.config.flags,
            "metrics": {SHOWN[m]: self.mean(m) for m in MEASURES},
            "vs_default": {SHOWN[m]: v for m, v in self.vs_default.items()},
            "llm_calls_per_question": self.config.llm_calls,
            "seconds_per_question": self.seconds,
            "search_seconds_per_question": self.search_seconds,
            "per_question": {SHOWN[m]: self.scores[m] for m in MEASURES},
        }


@dataclass
class WindowRow:
    """Neighbour windows around the chosen configuration's first ``k`` hits."""

    window: int
    k: int
    hits: dict[str, float]
    """Question -> 1 when a window holds a reference chunk, else 0."""
    chars: float
    """Mean characters of answer context per question (what the answer LLM reads)."""

    @property
    def hit_rate(self) -> float:
        """Share of questions whose answer context holds a reference chunk."""
        return statistics.fmean(self.hits.values())


@dataclass
class TuneReport:
    """What `tune` measured and what it recommends."""

    rows: list[TuneRow]
    recommendation: Recommendation
    meta: dict[str, Any]
    windows: list[WindowRow] = field(default_factory=list)
    window_choice: int | None = None
    lead: LexicalLead | None = None
    """BM25's lead over dense by the questions' overlap with their chunk (a test set's)."""

    def row(self, name: str) -> TuneRow:
        """The row of configuration ``name``."""
        return next(r for r in self.rows if r.config.name == name)

    def markdown(self) -> str:
        """The table, the windows (if measured) and the recommendation, as Markdown."""
        lines = [
            "| configuration | hit@1 | hit@5 | MRR@10 | nDCG@10 | nDCG@10 vs hybrid (95% CI) "
            "| LLM calls/q | s/q |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            name = r.config.name + (" (default)" if r.config.name == REFERENCE else "")
            if r.config.name == self.recommendation.name:
                name = f"**{name}** (recommended)"
            delta = r.vs_default.get(PRIMARY)
            cell = ""
            if delta:
                low, high = delta["ci"]
                cell = f"{100 * delta['delta']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"
            lines.append(
                f"| {name} | "
                + " | ".join(f"{100 * r.mean(m):.1f}" for m in MEASURES)
                + f" | {cell} | {r.config.llm_calls} | {r.seconds:.2f} |"
            )
        if self.windows:
            lines += [
                "",
                f"Answer context around {self.recommendation.name}'s first "
                f"{self.windows[0].k} hits:",
                "",
                "| window | holds a reference chunk | characters/q |",
                "|---|---|---|",
            ]
            lines += [
                f"| {w.window}{' (recommended)' if w.window == self.window_choice else ''} "
                f"| {100 * w.hit_rate:.1f}% | {w.chars:.0f} |"
                for w in self.windows
            ]
        if self.lead is not None:
            lines += ["", self.lead.sentence()]
        return "\n".join(lines)

    def chosen_retriever(self, store: VectorStore, llm: Any = None, k: int = 4) -> Any:
        """The recommended configuration as a retriever over ``store`` (windows included).

        ``llm`` writes the hypotheses of a HyDE configuration (default: the hypothesis
        writer in force).
        """
        from hyde_lc.retrievers.hyde import HyDERetriever
        from hyde_lc.retrievers.neighbors import NeighborExpandingRetriever

        fields = dict(by_name(self.recommendation.name).mode.fields)
        lexical = fields.pop("lexical", "auto")
        if int(fields.get("n_hypotheses", 1)) and llm is None:
            from hyde_lc.models.loading import load_llm

            llm = load_llm(role="hypothesis")
        base = HyDERetriever(
            vectorstore=store,
            hypothesis_llm=llm if int(fields.get("n_hypotheses", 1)) else None,
            k=k,
            lexical=lexical,
            **fields,
        )
        if not self.window_choice:
            return base
        return NeighborExpandingRetriever(base_retriever=base, k=k, window=self.window_choice)

    def choice(self) -> str:
        """The recommendation as a sentence, keyword arguments and flags."""
        config = by_name(self.recommendation.name)
        window = self.window_choice or 0
        kwargs = f"HyDERetriever(vectorstore=store, {config.kwargs})".replace(
            ", (the defaults)", ""
        )
        flags = config.flags or "(no hyde-lc flag selects it: use it from Python)"
        lines = [f"recommended: {self.recommendation.reason()}", f"  Python: {kwargs}"]
        if window:
            lines[-1] = (
                f"  Python: NeighborExpandingRetriever(base_retriever={kwargs}, window={window})"
            )
            flags += f" --window {window}" if config.flags else ""
        lines.append(f"  hyde-lc: {flags}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of everything measured."""
        return {
            "meta": self.meta,
            "recommendation": {
                "name": self.recommendation.name,
                "reason": self.recommendation.reason(),
                "beaten": self.recommendation.beaten,
                "candidates": self.recommendation.candidates,
                "window": self.window_choice,
            },
            "rows": [r.to_json() for r in self.rows],
            "windows": [
                {"window": w.window, "k": w.k, "hit_rate": w.hit_rate, "chars": w.chars}
                for w in self.windows
            ],
            "lexical_lead": self.lead.to_json() if self.lead is not None else None,
        }

    def plot(self, path: Path) -> Path:
        """nDCG@10 of each configuration minus the default's, with 95% intervals, as PNG."""
        try:
            from matplotlib.figure import Figure
        except ImportError as exc:
            raise MissingDependencyError("plots", 'pip install "hyde-lc[eval]"') from exc
        rows = [r for r in self.rows if r.vs_default]
        fig = Figure(figsize=(7, 0.5 * len(rows) + 1.5))
        ax = fig.subplots()
        names = [r.config.name for r in rows]
        deltas = [100 * r.vs_default[PRIMARY]["delta"] for r in rows]
        low = [d - 100 * r.vs_default[PRIMARY]["ci"][0] for d, r in zip(deltas, rows, strict=True)]
        high = [100 * r.vs_default[PRIMARY]["ci"][1] - d for d, r in zip(deltas, rows, strict=True)]
        ax.errorbar(deltas, names, xerr=[low, high], fmt="o", color="#3a7", capsize=4)
        ax.axvline(0, color="#444", linestyle="--", linewidth=1)
        ax.set_xlabel(f"nDCG@10 minus {REFERENCE}'s (points, 95% paired bootstrap interval)")
        ax.set_title(f"{self.meta.get('questions')} questions; recommended: "
                     f"{self.recommendation.name}")  # fmt: skip
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        return path


def testset_data(questions: Sequence[Any], name: str = "testset") -> BeirDataset:
    """Questions with reference chunk ids as the bench's dataset (queries and qrels by key)."""
    return BeirDataset(
        name=name,
        corpus={},
        queries={q.key: q.question for q in questions},
        qrels={q.key: dict.fromkeys(q.reference_context_ids or (), 1) for q in questions},
    )


def tune(
    questions: str | os.PathLike[str] | Sequence[Any],
    store: VectorStore,
    *,
    configs: Sequence[TuneConfig] = TUNE_CONFIGS,
    llm: Any = None,
    lexical: LexicalSearch | Literal["auto"] = "auto",
    hypothesis_cache: Any = None,
    windows: Sequence[int] = (0, 1, 2),
    window_k: int = 4,
    allow_changed: bool = False,
    resamples: int = 5000,
) -> TuneReport:
    """Measure ``configs`` on a test set over ``store`` and recommend one (module docstring).

    ``questions``: a test-set file or its questions. With a hyde_lc collection the set is
    checked against it first (`hyde_lc.evaluation.testset.check_references`): a collection
    that changed since the set was made is refused, saying which references are gone,
    unless ``allow_changed``, which drops the questions whose references are gone or
    changed. ``llm``: the hypothesis writer (default: the one in force, loaded only if a
    configuration needs it). ``lexical``: the BM25 side (``auto``: the collection's
    own). ``windows``: neighbour windows measured around the chosen configuration (only
    over a hyde_lc collection; ``()`` skips them).
    """
    from hyde_lc.evaluation.testset import read_testset

    items = list(read_testset(questions) if isinstance(questions, str | os.PathLike) else questions)
    items, note = _checked(items, store, allow_changed)
    data = testset_data(items)
    needs_llm = any(c.llm_calls for c in configs)
    if needs_llm and llm is None:
        from hyde_lc.models.loading import load_llm

        llm = load_llm(role="hypothesis")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hyde-lc-tune-") as scratch:
        cache = hypothesis_cache
        if cache is None and needs_llm:
            from hyde_lc.hyde.hypothesis_cache import HypothesisCache

            cache = HypothesisCache(Path(scratch) / "hypotheses.sqlite")
        ordered = sorted(configs, key=lambda c: -c.llm_calls)  # writers first: they fill the cache
        results = run_modes(data, [c.mode for c in ordered], store, lexical, llm, cache, 1)
        by_config = dict(zip([c.name for c in ordered], results, strict=True))
        rows = _rows(configs, by_config, data, resamples)
        costs = {r.config.name: (float(r.config.llm_calls), r.seconds) for r in rows}
        choice = recommend({r.config.name: r.scores[PRIMARY] for r in rows}, costs, resamples)
        report = TuneReport(rows, choice, _meta(items, store, llm, needs_llm, note, started))
        report.lead = _lead(rows, items)
        if windows and lexical == "auto" and _has_chunk_positions(items):
            chosen = by_name(choice.name)
            base = chosen.mode.retriever(store, lexical, llm, cache)
            report.windows = answer_windows(items, base, windows, window_k)
            report.window_choice = _window_choice(report.windows, resamples)
    report.meta["seconds"] = round(time.perf_counter() - started, 1)
    return report


def _checked(items: list[Any], store: Any, allow_changed: bool) -> tuple[list[Any], str | None]:
    """The questions that still fit the collection; refused when it changed (module doc)."""
    from hyde_lc.evaluation.testset import ChunkSource, check_references

    if not any("testset" in q.extra for q in items) or not hasattr(store, "hybrid"):
        return items, None
    check = check_references(items, ChunkSource.of_store(store))
    if check.same_collection:
        return items, None
    if not allow_changed:
        raise HydeLcError(
            f"{check.describe()}. The test set was made on the collection as it was: make "
            "a new one (hyde-lc testset --restart), or pass --allow-changed "
            "(allow_changed=True) to tune on the questions whose references are intact"
        )
    broken = check.broken_questions
    kept = [q for q in items if q.question not in broken]
    if not kept:
        raise HydeLcError(f"{check.describe()}: no question is left; make a new test set")
    return kept, check.describe()


def _lead(rows: Sequence[TuneRow], items: Sequence[Any]) -> LexicalLead | None:
    scores = {r.config.name: r.scores[PRIMARY] for r in rows}
    overlap = {
        q.key: float(q.extra["testset"]["overlap"])
        for q in items
        if isinstance(q.extra.get("testset"), dict) and "overlap" in q.extra["testset"]
    }
    if "bm25" not in scores or "dense" not in scores:
        return None
    return lexical_lead(scores["bm25"], scores["dense"], overlap)


def _rows(
    configs: Sequence[TuneConfig],
    results: dict[str, ModeResult],
    data: BeirDataset,
    resamples: int,
) -> list[TuneRow]:
    pairs = [(c, results[c.name]) for c in configs]
    calls = sum(c.llm_calls * len(r.written) for c, r in pairs)
    llm_seconds = sum(sum(r.written.values()) for _, r in pairs) / calls if calls else None
    rows = [
        TuneRow(
            c,
            results[c.name],
            per_query_measures(data.qrels, results[c.name].runs, MEASURES),
            llm_seconds,
        )
        for c in configs
    ]
    reference = next((r for r in rows if r.config.name == REFERENCE), None)
    if reference is not None:
        order = sorted(data.queries)
        for row in rows:
            if row is reference:
                continue
            for measure in MEASURES:
                delta, ci = paired_bootstrap(
                    [reference.scores[measure][q] for q in order],
                    [row.scores[measure][q] for q in order],
                    resamples,
                )
                row.vs_default[measure] = {"delta": delta, "ci": list(ci)}
    return rows


def _meta(
    items: list[Any], store: Any, llm: Any, needs_llm: bool, note: str | None, started: float
) -> dict[str, Any]:
    from hyde_lc.models.loading import embedding_model_id, llm_model_name

    embeddings = getattr(store, "embeddings", None)
    return {
        "questions": len(items),
        "embeddings": embedding_model_id(embeddings) if embeddings is not None else None,
        "llm": llm_model_name(llm) if needs_llm and llm is not None else None,
        "collection_note": note,
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }


# -- answer windows -----------------------------------------------------------------------


def _has_chunk_positions(items: Sequence[Any]) -> bool:
    return all("chunk_index" in q.extra and "doc_id" in q.extra for q in items)


def window_holds(doc: Any, doc_id: str, index: int) -> bool:
    """Whether a retrieved window (or a bare chunk) covers chunk ``index`` of ``doc_id``."""
    meta = doc.metadata
    if meta.get("doc_id") != doc_id:
        return False
    start = meta.get("window_start", meta.get("chunk_index"))
    end = meta.get("window_end", meta.get("chunk_index"))
    return isinstance(start, int) and isinstance(end, int) and start <= index <= end


def answer_windows(
    items: Sequence[Any], base: Any, windows: Sequence[int], k: int
) -> list[WindowRow]:
    """For each window size, how often the first ``k`` windows hold the reference chunk."""
    from hyde_lc.retrievers.neighbors import NeighborExpandingRetriever

    rows = []
    for window in windows:
        retriever = (
            NeighborExpandingRetriever(base_retriever=base, k=k, window=window) if window else None
        )
        hits: dict[str, float] = {}
        chars: list[int] = []
        for q in items:
            docs = (
                retriever.invoke(q.question) if retriever is not None else base.invoke(q.question)
            )[:k]
            doc_id, index = str(q.extra["doc_id"]), int(q.extra["chunk_index"])
            hits[q.key] = float(any(window_holds(d, doc_id, index) for d in docs))
            chars.append(sum(len(d.page_content) for d in docs))
        rows.append(WindowRow(window, k, hits, statistics.fmean(chars) if chars else 0.0))
    return rows


def _window_choice(rows: Sequence[WindowRow], resamples: int) -> int:
    """The same rule as `recommend`, over windows: cost = characters of context."""
    scores = {str(r.window): r.hits for r in rows}
    costs = {str(r.window): (0.0, r.chars) for r in rows}
    return int(recommend(scores, costs, resamples).name)


def write_tune_report(report: TuneReport, out: Path) -> dict[str, Path]:
    """Write ``tune.json``, ``tune.md`` and ``tune.png`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "tune.json", "markdown": out / "tune.md", "plot": out / "tune.png"}
    paths["json"].write_text(json.dumps(report.to_json(), indent=1, ensure_ascii=False))
    paths["markdown"].write_text(report.markdown() + "\n\n" + report.choice() + "\n")
    report.plot(paths["plot"])
    return paths
