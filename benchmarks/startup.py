"""Start-up time of ``import hyde_lc`` and ``hyde-lc --help``, as a ratio to a bare Python.

Each command runs ``--runs`` times as a fresh process, the commands taking turns (so a
machine that slows down mid-run slows all of them alike); the table gives each one's
median wall time and its ratio to the median of ``python -c pass`` measured in the same
run, which cancels most of the machine's speed and load.

``--before REV`` (repeatable) also measures the package as it was at git revision REV (its
``hyde_lc`` folder, extracted with ``git archive`` into a temporary folder and put first
on ``PYTHONPATH``), in the same run. ``--out DIR`` also writes the table (``startup.md``)
and every run's times (``startup.json``) there.

    python benchmarks/startup.py --runs 21 --before 50ecab5 --out benchmarks/results/startup

The targets: ``hyde-lc --help`` under 1 s and ``import hyde_lc`` under 1.5 s on the
development machine (2 cores). The first use of a public name (``from hyde_lc import
HyDERetriever``) imports LangChain and is listed for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PYTHON = sys.executable
HYDE_LC = str(Path(PYTHON).parent / "hyde-lc")
ROOT = Path(__file__).resolve().parents[1]
HELP_IN_PROCESS = 'from hyde_lc.cli import main; main(["--help"])'


@dataclass
class Command:
    name: str
    argv: list[str]
    pythonpath: str | None = None
    times: list[float] = field(default_factory=list)

    def run(self, cwd: str) -> float:
        env = dict(os.environ)
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        started = time.perf_counter()
        subprocess.run(
            self.argv,
            env=env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
        )
        return time.perf_counter() - started


def commands(before: dict[str, str]) -> list[Command]:
    rows = [
        Command("bare Python", [PYTHON, "-c", "pass"]),
        Command("import hyde_lc", [PYTHON, "-c", "import hyde_lc"]),
        Command("hyde-lc --help", [HYDE_LC, "--help"]),
        Command("hyde-lc ask --help", [HYDE_LC, "ask", "--help"]),
        Command("hyde-lc ingest --help", [HYDE_LC, "ingest", "--help"]),
        Command("--help, in one Python process", [PYTHON, "-c", HELP_IN_PROCESS]),
        Command(
            "first use: from hyde_lc import HyDERetriever",
            [PYTHON, "-c", "from hyde_lc import HyDERetriever"],
        ),
    ]
    for rev, old_source in before.items():
        rows += [
            Command(f"import hyde_lc at {rev}", [PYTHON, "-c", "import hyde_lc"], old_source),
            Command(
                f"--help, in one Python process, at {rev}",
                [PYTHON, "-c", HELP_IN_PROCESS],
                old_source,
            ),
        ]
    return rows


def extract(rev: str, folder: str) -> None:
    """The ``hyde_lc`` folder of revision ``rev`` into ``folder`` (the work tree untouched)."""
    archive = Path(folder) / "src.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", rev, "hyde_lc"], cwd=ROOT, stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")


def git(*argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="runs of each command")
    parser.add_argument(
        "--before", metavar="REV", action="append", default=[], help="also measure revision REV"
    )
    parser.add_argument("--out", type=Path, help="also write startup.md and startup.json here")
    args = parser.parse_args()

    # Every command runs in an empty folder: `python -c` puts the working directory first
    # on sys.path, which would shadow PYTHONPATH with the work tree's hyde_lc.
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as empty:
        before = {rev: str(Path(folder) / str(i)) for i, rev in enumerate(args.before)}
        for rev, old_source in before.items():
            Path(old_source).mkdir()
            extract(rev, old_source)
        rows = commands(before)
        for row in rows:  # warm the file cache (the first run reads every .pyc)
            row.run(empty)
        for _ in range(args.runs):
            for row in rows:
                row.times.append(row.run(empty))

    base = statistics.median(rows[0].times)
    commit = git("rev-parse", "--short", "HEAD") + (" (modified)" if git("status", "-s") else "")
    lines = [
        f"Command: `{shlex.join([Path(PYTHON).name, *sys.argv])}`",
        f"({args.runs} runs each, interleaved; commit {commit}; "
        f"Python {platform.python_version()}, {os.cpu_count()} cores)\n",
        "| what | command | median s | min s | ratio to bare Python |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        shown = shlex.join([Path(row.argv[0]).name, *row.argv[1:]])
        median = statistics.median(row.times)
        lines.append(
            f"| {row.name} | `{shown}` | {median:.3f} | {min(row.times):.3f} "
            f"| {median / base:.1f}x |"
        )
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "startup.md").write_text("\n".join(lines) + "\n")
        result = {
            "commit": commit,
            "runs": args.runs,
            "rows": [{"name": row.name, "argv": row.argv[1:], "times": row.times} for row in rows],
        }
        (args.out / "startup.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
