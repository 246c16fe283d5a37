"""The benchmark harness: retrieval quality and speed of configurations; `tune` chooses one.

`tune` measures the configurations on a test set made from your own collection
(`hyde_lc.evaluation.testset`) and recommends one; the rest runs on BEIR data sets.

The names below are imported on first use (the harness loads numpy, LangChain and the
models).

Example:
    >>> from hyde_lc.bench import run_benchmark, write_report
    >>> report = run_benchmark("scifact", limit=20)  # doctest: +SKIP
    >>> write_report(report, Path("bench-out"))  # doctest: +SKIP

"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyde_lc.core.lazy import lazy_exports

if TYPE_CHECKING:
    from hyde_lc.bench.beir import BeirDataset, load_beir
    from hyde_lc.bench.retrieval import (
        BASELINES,
        BM25,
        DEFAULT,
        HYBRID,
        MODE_KINDS,
        STANDARD,
        BenchMode,
        BenchReport,
        Comparison,
        ExactIndex,
        ModeResult,
        default_modes,
        hyde_variants,
        paired_bootstrap,
        run_benchmark,
        select_modes,
        write_report,
    )
    from hyde_lc.bench.tune import TUNE_CONFIGS, Recommendation, TuneReport, recommend, tune

_EXPORTS = {
    "BeirDataset": "hyde_lc.bench.beir",
    "load_beir": "hyde_lc.bench.beir",
    "BASELINES": "hyde_lc.bench.retrieval",
    "BM25": "hyde_lc.bench.retrieval",
    "DEFAULT": "hyde_lc.bench.retrieval",
    "HYBRID": "hyde_lc.bench.retrieval",
    "MODE_KINDS": "hyde_lc.bench.retrieval",
    "STANDARD": "hyde_lc.bench.retrieval",
    "Comparison": "hyde_lc.bench.retrieval",
    "ModeResult": "hyde_lc.bench.retrieval",
    "hyde_variants": "hyde_lc.bench.retrieval",
    "select_modes": "hyde_lc.bench.retrieval",
    "BenchMode": "hyde_lc.bench.retrieval",
    "BenchReport": "hyde_lc.bench.retrieval",
    "ExactIndex": "hyde_lc.bench.retrieval",
    "default_modes": "hyde_lc.bench.retrieval",
    "paired_bootstrap": "hyde_lc.bench.retrieval",
    "run_benchmark": "hyde_lc.bench.retrieval",
    "write_report": "hyde_lc.bench.retrieval",
    "TUNE_CONFIGS": "hyde_lc.bench.tune",
    "Recommendation": "hyde_lc.bench.tune",
    "TuneReport": "hyde_lc.bench.tune",
    "recommend": "hyde_lc.bench.tune",
    "tune": "hyde_lc.bench.tune",
}
"""Public name -> the module that defines it."""

__all__ = [
    "BASELINES",
    "BM25",
    "DEFAULT",
    "HYBRID",
    "MODE_KINDS",
    "STANDARD",
    "TUNE_CONFIGS",
    "BeirDataset",
    "BenchMode",
    "BenchReport",
    "Comparison",
    "ExactIndex",
    "ModeResult",
    "Recommendation",
    "TuneReport",
    "default_modes",
    "hyde_variants",
    "load_beir",
    "paired_bootstrap",
    "recommend",
    "run_benchmark",
    "select_modes",
    "tune",
    "write_report",
]


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
