"""The benchmark harness: retrieval quality of standard and HyDE modes on BEIR datasets.

Example:
    >>> from hyde_lc.bench import default_modes, run_benchmark, write_report
    >>> report = run_benchmark("../shared/data/scifact", limit=20)  # doctest: +SKIP
    >>> write_report(report, Path("bench-out"))  # doctest: +SKIP

"""

from hyde_lc.bench.beir import BeirDataset, load_beir
from hyde_lc.bench.retrieval import (
    BenchMode,
    BenchReport,
    ExactIndex,
    default_modes,
    paired_bootstrap,
    run_benchmark,
    write_report,
)

__all__ = [
    "BeirDataset",
    "BenchMode",
    "BenchReport",
    "ExactIndex",
    "default_modes",
    "load_beir",
    "paired_bootstrap",
    "run_benchmark",
    "write_report",
]
