"""Retrieval overhead of this code against an older revision, in one paired, interleaved run.

`benchmarks/retrieval_overhead.py` (public API only) runs ``--rounds`` times for each
variant, the variants taking turns within each round (so a machine that slows down slows
all of them alike), over one collection ingested once (``--work``). The variants: the
package as it was at ``--before REV`` (its ``hyde_lc`` folder extracted with ``git
archive`` and put first on ``PYTHONPATH``), the package now, and the package now with the
BM25 index reloaded by every search (``--reload-index-per-search``: the cost that removing
the reload saved; the reload alone is also timed, `reload_cost`). Each run reports p50/p95
per configuration over ``--queries`` questions; the table gives, per variant and
configuration, the median of the rounds' p50 and the median of the paired ratio to the
older revision, with its min and max.

    python benchmarks/paired_overhead.py scifact --before ed2c3b0 --work /tmp/overhead \\
        --rounds 5 --out benchmarks/results/paired_overhead
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "retrieval_overhead.py"


def extract(rev: str, folder: Path) -> None:
    """The ``hyde_lc`` folder of git revision ``rev``, unpacked into ``folder``."""
    archive = folder / "src.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", rev, "hyde_lc"], cwd=ROOT, stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")


def run_once(
    pythonpath: Path, args: argparse.Namespace, mode: list[str], out: Path
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    command = [
        sys.executable,
        str(SCRIPT),
        str(args.data),
        "--docs",
        str(args.docs),
        "--queries",
        str(args.queries),
        "--work",
        str(args.work),
        "--out",
        str(out),
        *mode,
    ]
    out.unlink(missing_ok=True)
    # Run from a neutral folder: a working directory holding hyde_lc would shadow PYTHONPATH.
    done = subprocess.run(command, env=env, cwd=tempfile.gettempdir(), capture_output=True)
    if not out.exists():
        raise RuntimeError(f"{command} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    # A run that wrote its figures and then crashed at exit (the interpreter tearing down
    # native threads) still measured: its exit code is kept with its figures.
    return {**json.loads(out.read_text()), "exit_code": done.returncode}


RELOAD_COST = """
import json, sys, time
from hyde_lc import open_store
from hyde_lc.store.collection import HybridCollection
index = HybridCollection.of(open_store(sys.argv[1])).sync(max_age=0)
times = []
for _ in range(2000):
    start = time.perf_counter()
    len(index)  # what each search once paid: the index reloaded, its size read
    times.append(time.perf_counter() - start)
times.sort()
print(json.dumps({"reload_us_p50": round(1e6 * times[1000], 1), "chunks": len(index)}))
"""


def reload_cost(work: Path) -> dict[str, Any]:
    """What reloading the collection's BM25 index costs once (the saving per search)."""
    done = subprocess.run(
        [sys.executable, "-c", RELOAD_COST, str(work / "store")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tempfile.gettempdir(),
        capture_output=True,
        check=True,
        text=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--before", required=True, help="the git revision to compare with")
    parser.add_argument("--work", type=Path, required=True, help="the collection (ingested once)")
    parser.add_argument("--docs", type=int, default=2500)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    modes = {"hybrid (default)": ["--no-writer"], "hybrid HyDE, instant writer": []}
    with tempfile.TemporaryDirectory(prefix="hyde-before-") as tmp:
        before = Path(tmp)
        extract(args.before, before)
        variants = {
            f"before ({args.before})": (before, []),
            "now": (ROOT, []),
            "now, index reloaded per search": (ROOT, ["--reload-index-per-search"]),
        }
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {
            v: {m: [] for m in modes} for v in variants
        }
        for number in range(args.rounds):
            for mode, flags in modes.items():
                order = list(variants) if number % 2 == 0 else list(reversed(variants))
                for variant in order:
                    path, extra = variants[variant]
                    out = Path(tmp) / "run.json"
                    result = run_once(path, args, [*flags, *extra], out)
                    runs[variant][mode].append(result)
                    print(number, mode, variant, [r["p50_ms"] for r in result["rows"]], flush=True)
    base = next(iter(variants))
    lines = [
        "| variant | configuration | window | p50 ms (median of rounds) "
        "| ratio to before, median [min, max] |",
        "|---|---|---|---|---|",
    ]
    for variant, by_mode in runs.items():
        for mode, results in by_mode.items():
            for row, _ in enumerate(results[0]["rows"]):
                p50 = [r["rows"][row]["p50_ms"] for r in results]
                ratios = [
                    new / old
                    for new, old in zip(
                        p50, [r["rows"][row]["p50_ms"] for r in runs[base][mode]], strict=True
                    )
                ]
                window = results[0]["rows"][row]["window"]
                lines.append(
                    f"| {variant} | {mode} | {window} | {statistics.median(p50):.1f} | "
                    f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}] |"
                )
    cost = reload_cost(args.work)
    lines.append("")
    lines.append(
        f"Reloading the BM25 index of {cost['chunks']:,} chunks once (what each search paid "
        f"before): {cost['reload_us_p50']} us (median of 2,000)."
    )
    table = "\n".join(lines)
    print(table)
    (args.out / "paired_overhead.md").write_text(table + "\n")
    (args.out / "paired_overhead.json").write_text(
        json.dumps({"runs": runs, "reload": cost}, indent=1)
    )


if __name__ == "__main__":
    main()
