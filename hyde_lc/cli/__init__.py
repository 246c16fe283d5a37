r"""The ``hyde-lc`` command: ingest, ask, info, evaluate, compare, testset, tune, bench, speed.

One module per group of commands (`hyde_lc.cli.collection`: ingest and info;
`hyde_lc.cli.ask`; `hyde_lc.cli.evaluate`: evaluate and compare; `hyde_lc.cli.testset`:
testset and tune; `hyde_lc.cli.bench`: bench and speed), the options they share
(`hyde_lc.cli.options`) and what they print (`hyde_lc.cli.render`). Building the parser
imports none of the heavy libraries (LangChain, numpy, Chroma, the model runtimes): each
command imports what it needs when it runs, so ``hyde-lc --help`` answers at once. The
commands build the library's objects from their options and print what those return;
retrieval itself is the library's.

Example:
    $ hyde-lc ingest --sample
    $ hyde-lc ask "Who designed the Pharos of Alexandria?"
    $ hyde-lc ask "Who designed the Pharos of Alexandria?" --mode standard --json
    $ hyde-lc info --json

"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from hyde_lc.cli import ask, bench, collection, evaluate, testset
from hyde_lc.cli.options import unicode_problem
from hyde_lc.cli.render import shown_line
from hyde_lc.errors import HydeLcError
from hyde_lc.hyde.prompts import DEFAULT_PROMPT, PROMPTS
from hyde_lc.ingest.samples import sample_files

__all__ = ["build_parser", "main", "sample_files"]

INTERRUPTED_EXIT = 130
"""Exit code after Ctrl-C: 128 + SIGINT, as a shell reports it."""
SIGPIPE_EXIT = 141
"""Exit code when the reader of standard output goes away (``hyde-lc info | head -1``):
128 + SIGPIPE, what a shell reports for any program a closed pipe stops."""

EPILOG = """\
exit status:
  0    done
  1    work left undone: a file with no text to index or something inside a folder
       passed over (ingest ingests the rest), a question that failed (evaluate records
       it); or an unexpected error (HYDE_LC_DEBUG=1 shows its traceback)
  2    a mistake to fix (bad argument, missing file, unknown model, another embedding
       model than the collection's, an endpoint that fails); nothing stored is changed
  130  interrupted (Ctrl-C)
  141  standard output closed early (hyde-lc info | head -1)

environment:
  HYDE_LC_STORE, HYDE_LC_CHROMA_URL, HYDE_LC_COLLECTION   where the collection is
  HYDE_LC_EMBEDDINGS, HYDE_LC_HYPOTHESIS_LLM, HYDE_LC_ANSWER_LLM   model specs
       (with a hypothesis model set, ask and evaluate use HyDE unless --mode standard)
  HYDE_LC_REQUEST_TIMEOUT, HYDE_LC_CHROMA_TIMEOUT   seconds per remote request
  HYDE_LC_REFRESH_INTERVAL   seconds a search may reuse the collection's state (1)
  HYDE_LC_AUDIT_INTERVAL   seconds between checks of the BM25 index against the
       collection's contents, in the background (600; 0 = off)
  HYDE_LC_WRITE_WAIT   seconds a writer of a Chroma server collection waits for
       another to finish (600)
  HYDE_LC_WRITER_LEASE   seconds a server writer's lease lasts unrenewed: a killed
       writer's unfinished write is finished after it (30)
  HYDE_LC_N_CTX, HYDE_LC_THREADS   local models: context window, CPU threads
  HYDE_LC_CACHE_DIR, HYDE_LC_PRICING, HYDE_LC_DEBUG   (see the README)
"""


class _Parser(argparse.ArgumentParser):
    """argparse, with the offending argument in an error shown as one escaped line.

    argparse quotes some arguments with ``repr`` but prints others (unrecognised
    arguments) as they are, so a pasted escape sequence would reach the terminal.
    """

    def error(self, message: str) -> Any:  # argparse's signature says NoReturn
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {shown_line(message)}\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hyde-lc")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command (exposed for tests and docs)."""
    parser = _Parser(
        prog="hyde-lc",
        description="HyDE retrieval-augmented question answering, offline.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    prompts = sorted(PROMPTS)
    collection.add_commands(sub)
    ask.add_command(sub, prompts, DEFAULT_PROMPT)
    evaluate.add_commands(sub, prompts, DEFAULT_PROMPT)
    testset.add_commands(sub)
    bench.add_commands(sub, prompts)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    r"""Run the CLI; returns the exit code (see `EPILOG`).

    Text from documents, file names and error messages is printed with control
    characters escaped (an ESC byte shows as ``\x1b``), so it cannot drive the terminal.
    """
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    log = _TerminalLog(logging.WARNING)
    logging.getLogger("hyde_lc").addHandler(log)
    try:
        try:
            with warnings.catch_warnings():  # restores the caller's warning settings
                warnings.showwarning = _show_warning
                return _run(argv)
        finally:
            logging.getLogger("hyde_lc").removeHandler(log)
            sys.stdout.flush()  # a closed pipe shows here when the output was buffered
    except BrokenPipeError:
        _stdout_to_devnull()
        return SIGPIPE_EXIT


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    debug = False
    try:
        from hyde_lc.core.settings import settings  # after parsing: --help stays light

        debug = settings().debug  # a bad HYDE_LC_* value is refused before any work
        return int(args.func(args))
    except HydeLcError as exc:
        print(f"hyde-lc: error: {shown_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hyde-lc: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT
    except BrokenPipeError:
        raise  # the reader of our output left: main() exits quietly
    except UnicodeError as exc:  # text that no encoder or tokenizer takes: a mistake to fix
        print(f"hyde-lc: error: {shown_line(_unicode_message(exc))}", file=sys.stderr)
        return 2
    except Exception as exc:  # no user should meet a bare traceback
        if debug:
            raise
        print(
            f"hyde-lc: error: {type(exc).__name__}: {shown_line(str(exc))}\n"
            "(set HYDE_LC_DEBUG=1 to see the traceback)",
            file=sys.stderr,
        )
        return 1


def _unicode_message(exc: UnicodeError) -> str:
    """What to do about text that cannot be encoded or decoded (``exc``)."""
    if isinstance(exc, UnicodeEncodeError) and "surrogates" in exc.reason:
        problem = unicode_problem(exc.object) or f"{exc.object[exc.start]!r} is not valid"
        return (
            f"the input holds text that is not valid Unicode: {problem} "
            "(a JSON \\ud800 escape without its pair, or bytes that are not UTF-8). Fix "
            "that text: questions and documents must be valid UTF-8"
        )
    if isinstance(exc, UnicodeEncodeError):
        return (
            f"cannot write {exc.object[exc.start : exc.end]!r} in the {exc.encoding} encoding "
            "of the output: set PYTHONIOENCODING=utf-8 (or a UTF-8 locale) and run again"
        )
    return f"text that is not valid {getattr(exc, 'encoding', 'Unicode')}: {exc}"


def _stdout_to_devnull() -> None:
    """Point standard output at /dev/null, so the flush at exit cannot fail again.

    Python's documented recipe for a closed pipe (the signal module's "Note on SIGPIPE").
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (captured in-process)
        pass


class _TerminalLog(logging.Handler):
    """The package's warnings (``store is being written by ...``) as escaped lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(f"hyde-lc: {shown_line(record.getMessage())}", file=sys.stderr)
        except Exception:
            self.handleError(record)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """`warnings.showwarning` for the CLI: one escaped line (a warning may quote data)."""
    print(
        f"hyde-lc: warning: {shown_line(str(message))} "
        f"({category.__name__}, {shown_line(filename)}:{lineno})",
        file=file or sys.stderr,
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
