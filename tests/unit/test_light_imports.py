"""``import hyde_lc`` and ``hyde-lc --help`` load none of the heavy libraries.

Each check runs in a fresh interpreter (this test process has imported them all) and
lists the heavy modules found in ``sys.modules`` afterwards. Start-up times themselves are
measured by benchmarks/startup.py.
"""

import json
import subprocess
import sys

import pytest

HEAVY = (
    "chromadb",
    "onnxruntime",
    "xllamacpp",
    "tantivy",
    "langchain_chroma",
    "langchain_core",
    "langchain_community",
    "langchain_openai",
    "numpy",
    "openai",
    "ragas",
    "pydantic",
)
COMMANDS = ("ingest", "info", "ask", "evaluate", "compare", "bench", "speed")


def heavy_modules_after(code: str) -> list[str]:
    probe = (
        f"import json, sys\n{code}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_import_hyde_lc_loads_no_heavy_library():
    assert heavy_modules_after("import hyde_lc") == []


def test_the_evaluation_and_bench_packages_import_lightly_too():
    assert heavy_modules_after("import hyde_lc.evaluation, hyde_lc.bench") == []


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_loads_no_heavy_library(command):
    argv = ["--help"] if command is None else [command, "--help"]
    code = (
        "import contextlib, io\n"
        "from hyde_lc.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, exc.code\n"
    )
    assert heavy_modules_after(code) == []


def test_a_parser_error_loads_no_heavy_library():
    """A mistake on the command line is refused before anything heavy is imported."""
    code = (
        "import contextlib, io\n"
        "from hyde_lc.cli import main\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        "    try:\n"
        "        main(['ask', 'q', '--k', '0'])\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 2, exc.code\n"
    )
    assert heavy_modules_after(code) == []


def test_a_public_name_is_imported_on_first_use():
    """The probe itself sees heavy imports: HyDERetriever brings LangChain."""
    assert "langchain_core" in heavy_modules_after("from hyde_lc import HyDERetriever")
