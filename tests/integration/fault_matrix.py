"""The bad-input and fault matrix: cases as data, each run through the real ``hyde-lc``.

`fault_matrix.toml` (next to this file) holds one ``[[case]]`` per situation: the
command's arguments, an optional named setup, the exit code expected, text its stderr
and stdout must contain, and whether the collection must be left as it was. Every case
runs ``hyde-lc`` as a subprocess against a real Chroma store built once from the bundled
sample PDF with the real ``local:minilm`` embeddings; a case that may write gets its own
copy (setup ``scratch_store``).

Checked for every case: the exit code; no ``Traceback`` and no ESC or BEL byte in either
stream; the expected fragments; with ``unchanged = true`` the digest of the collection's
logical content (ids, documents and metadata of every collection, read through a fresh
Chroma client) is the same after the run, with ``unchanged = false`` it differs;
``absent`` paths do not exist afterwards (a refused command made no store), ``exists``
paths do, ``same_files`` keep their bytes. A case marked ``pending = "<area>"`` describes
behaviour still being built; the test skips it with that reason.

Run:
    .venv/bin/python -m pytest -p no:cacheprovider tests/integration/test_fault_matrix.py
    .venv/bin/python -m tests.integration.fault_matrix [-k TEXT] [--include-pending]

The second prints one row per case and the counts (total, holding, failing, pending).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MATRIX = Path(__file__).with_name("fault_matrix.toml")
HYDE_LC = str(Path(sys.executable).parent / "hyde-lc")
SAMPLE_PDF = ROOT / "hyde_lc" / "sample" / "lighthouses.pdf"
SAMPLE_QUESTIONS = ROOT / "hyde_lc" / "sample" / "questions.jsonl"
QUESTION = "Who designed the Pharos of Alexandria?"
SMALL_LLM = "local:smollm2-135m"
HOSTILE_NAME = "\x1b]0;pwned\x07\nnotes.txt"  # sets the terminal title; the newline forges a line


@dataclass(frozen=True)
class Case:
    """One row of the matrix (see the module docstring for what each field checks)."""

    id: str
    args: list[str]
    exit: int
    source: str = ""
    setup: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    stdout: list[str] = field(default_factory=list)
    not_stdout: list[str] = field(default_factory=list)
    unchanged: bool | None = None
    absent: list[str] = field(default_factory=list)
    exists: list[str] = field(default_factory=list)
    same_files: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    pipe: str | None = None
    timeout: float = 300.0
    needs: list[str] = field(default_factory=list)
    pending: str | None = None


def load_cases(path: Path = MATRIX) -> list[Case]:
    """The cases of the data file, checked: known keys, known setups, unique ids."""
    known = {f.name for f in fields(Case)}
    cases = []
    for raw in tomllib.loads(path.read_text(encoding="utf-8"))["case"]:
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"case {raw.get('id')!r}: unknown keys {sorted(unknown)}")
        case = Case(**raw)
        missing = [name for name in case.setup if name not in SETUPS]
        if missing:
            raise ValueError(f"case {case.id!r}: unknown setup {missing}")
        if case.pipe not in (None, "closed"):
            raise ValueError(f"case {case.id!r}: pipe must be 'closed'")
        cases.append(case)
    ids = [c.id for c in cases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"duplicate case ids: {duplicates}")
    return cases


# -- the session: one store, one folder of bad files ------------------------------------


def base_env() -> dict[str, str]:
    """The environment of every run: no user settings, the small local LLM for both roles
    on one thread."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("HYDE_LC_") and k != "OPENAI_API_KEY"
    }
    env.update(
        ANONYMIZED_TELEMETRY="False",
        HYDE_LC_HYPOTHESIS_LLM=SMALL_LLM,
        HYDE_LC_ANSWER_LLM=SMALL_LLM,
        HYDE_LC_EMBEDDINGS="local:minilm",
        HYDE_LC_THREADS="1",  # steady on a shared machine (see tests/integration/conftest.py)
    )
    return env


@dataclass
class Session:
    """What every case shares: the sample store (never written) and the bad files."""

    root: Path
    store: Path
    files: Path

    @classmethod
    def build(cls, root: Path) -> Session:
        store, files = root / "store", root / "files"
        made = subprocess.run(
            [HYDE_LC, "ingest", "--sample", "--store", str(store), "--json"],
            env=base_env(),
            capture_output=True,
            text=True,
            timeout=900,
        )
        if made.returncode != 0:
            raise RuntimeError(f"could not build the sample store: {made.stderr}")
        make_files(files)
        return cls(root=root, store=store, files=files)


def make_files(folder: Path) -> None:
    """Bad (and a few good) input files, made once and only read by the cases."""
    from pypdf import PdfWriter

    from tests.hostile_pdfs import content_pdf, zip_bomb_pdf

    folder.mkdir(parents=True)
    sample = SAMPLE_PDF.read_bytes()
    text = "The keeper trimmed the wick and wound the clockwork every night. " * 20
    (folder / "good.txt").write_text(text)
    (folder / "report.pdf").write_text("this is plain text, not a PDF")
    (folder / "cut.pdf").write_bytes(sample[:9000])
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4\n garbage")
    (folder / "data.csv").write_text("a,b\n1,2\n")
    (folder / "nosupported").mkdir()
    (folder / "nosupported" / "data.csv").write_text("a,b\n")
    (folder / "photo.txt").write_bytes(
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(32)) * 64
    )
    (folder / "big.txt").write_text("The keeper wound the clockwork. " * 70_000)  # 2.1 MB
    (folder / "empty.txt").write_bytes(b"")
    (folder / "empty.pdf").write_bytes(b"")
    (folder / "blank.md").write_text("  \n\n \t ")
    _blank_pdf(folder / "scanned.pdf")
    locked = PdfWriter(clone_from=str(SAMPLE_PDF))
    locked.encrypt(user_password="s3cret", owner_password="owner", algorithm="RC4-128")
    locked.write(str(folder / "locked.pdf"))
    line = "Phare de Cordouan, été 1823: la lentille de Fresnel change tout. "
    (folder / "utf16.txt").write_bytes((line * 5).encode("utf-16"))
    (folder / "cp1252.txt").write_bytes((line * 5).encode("cp1252"))
    (folder / "model.gguf").write_text("<html>404 Not Found</html>")
    (folder / "store-file").write_text("not a folder")
    (folder / "mixed").mkdir()
    (folder / "mixed" / "good.txt").write_text(text)
    (folder / "mixed" / "photo.txt").write_bytes((folder / "photo.txt").read_bytes())
    (folder / "hostile").mkdir()
    (folder / "hostile" / HOSTILE_NAME).write_text(text)
    content_pdf(folder / "shared-stream.pdf", 1_000_000, pages=100)  # 20 KB -> 100 MB to parse
    content_pdf(folder / "dense-page.pdf", 5_000_000)  # one page, 5 MB of content
    zip_bomb_pdf(folder / "bomb.pdf")  # 80 KB -> 80 MB of one stream
    (folder / "questions.jsonl").write_text(
        '{"question": "Who designed the Pharos of Alexandria?"}\n'
        '{"question": "How did the Fresnel lens change lighthouses?"}\n'
    )
    (folder / "questions-bad.jsonl").write_text('{"question": "ok?"}\nthis is not json\n')
    (folder / "questions-empty.jsonl").write_text("")
    (folder / "questions-surrogate.jsonl").write_text('{"question": "lens \\ud800?"}\n')
    (folder / "questions-noquestion.jsonl").write_text('{"reference": "no question here"}\n')


def _blank_pdf(path: Path) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.add_page()
    pdf.output(str(path))


def collection_digest(folder: Path) -> str | None:
    """Digest of every collection's ids, documents and metadata; None if no store is there.

    A fresh client each time (Chroma caches one system per path in a process, and a
    cached one would not see what the subprocess wrote).
    """
    if not (folder / "chroma.sqlite3").exists():
        return None
    import chromadb
    from chromadb.api.client import SharedSystemClient
    from chromadb.config import Settings

    SharedSystemClient.clear_system_cache()
    try:
        client = chromadb.PersistentClient(
            str(folder), settings=Settings(anonymized_telemetry=False)
        )
        digest = hashlib.sha256()
        for collection in sorted(client.list_collections(), key=lambda c: c.name):
            got = collection.get(include=["documents", "metadatas"])
            digest.update(
                repr((collection.name, sorted((collection.metadata or {}).items()))).encode()
            )
            rows = sorted(zip(got["ids"], got["documents"], got["metadatas"], strict=True))
            for row_id, document, metadata in rows:
                digest.update(repr((row_id, document, sorted((metadata or {}).items()))).encode())
        return digest.hexdigest()
    finally:
        SharedSystemClient.clear_system_cache()


# -- per-case setups --------------------------------------------------------------------


@dataclass
class Context:
    """One case's world: its folder, placeholders, environment and what to undo after."""

    session: Session
    tmp: Path
    values: dict[str, str]
    env: dict[str, str]
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    @property
    def store(self) -> Path:
        return Path(self.values["store"])

    def use_store(self, folder: Path) -> None:
        self.values["store"] = str(folder)
        self.env["HYDE_LC_STORE"] = str(folder)

    def hyde_lc(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the command as part of a setup (the setup fails if it does)."""
        done = subprocess.run(
            [HYDE_LC, *args], env=self.env, capture_output=True, text=True, timeout=600
        )
        if done.returncode != 0:
            raise RuntimeError(f"setup command {args} failed: {done.stderr}")
        return done


SETUPS: dict[str, Callable[[Context], None]] = {}


def setup(function: Callable[[Context], None]) -> Callable[[Context], None]:
    SETUPS[function.__name__] = function
    return function


@setup
def scratch_store(ctx: Context) -> None:
    """A copy of the sample store for a case that may write (or must prove it did not)."""
    copy = ctx.tmp / "store"
    shutil.copytree(ctx.session.store, copy)
    ctx.use_store(copy)


@setup
def hostile_store(ctx: Context) -> None:
    """A copy of the sample store that also holds a file whose name is an escape sequence."""
    scratch_store(ctx)
    ctx.hyde_lc("ingest", str(ctx.session.files / "hostile"))


@setup
def swapped_by_chromadb(ctx: Context) -> None:
    """A copy of the sample store in which another program (chromadb itself) deleted one
    chunk and added another: the chunk count is unchanged."""
    scratch_store(ctx)
    script = (
        "import sys, chromadb\n"
        "c = chromadb.PersistentClient(path=sys.argv[1]).get_collection('hyde_lc')\n"
        "got = c.get(limit=1, include=['embeddings'])\n"
        "c.delete(ids=got['ids'])\n"
        "c.add(ids=['outsider'], embeddings=[list(got['embeddings'][0])],\n"
        "      documents=['Lighthouse tenders carried supplies to remote stations.'],\n"
        "      metadatas=[{'source': 'outsider', 'file_name': 'outsider.txt'}])\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(ctx.store)],
        env=ctx.env,
        check=True,
        capture_output=True,
        timeout=300,
    )


@setup
def make_fifo(ctx: Context) -> None:
    """A named pipe called pipe.txt that nobody writes: reading it would wait forever."""
    folder = ctx.tmp / "fifo"
    folder.mkdir()
    os.mkfifo(folder / "pipe.txt")
    ctx.values["fifo"] = str(folder / "pipe.txt")
    ctx.values["fifo_dir"] = str(folder)


@setup
def unreadable_subfolder(ctx: Context) -> None:
    """docs/ with a readable file and a sub-folder nobody may list (mode 000)."""
    docs = ctx.tmp / "docs"
    (docs / "locked").mkdir(parents=True)
    (docs / "ok.txt").write_text((ctx.session.files / "good.txt").read_text())
    (docs / "locked" / "secret.txt").write_text("hidden")
    (docs / "locked").chmod(0)
    ctx.cleanups.append(lambda: (docs / "locked").chmod(stat.S_IRWXU))
    ctx.values["docs"] = str(docs)


@setup
def link_out_corpus(ctx: Context) -> None:
    """corpus/ with a document, and links named .txt to a secret and a document outside it."""
    secret, corpus = ctx.tmp / "secret", ctx.tmp / "corpus"
    secret.mkdir()
    corpus.mkdir()
    (secret / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n" * 5)
    (secret / "notes.txt").write_text((ctx.session.files / "good.txt").read_text())
    (corpus / "own.txt").write_text("The lamp room was painted white each spring. " * 20)
    (corpus / "passwd.txt").symlink_to(secret / "passwd")
    (corpus / "notes.txt").symlink_to(secret / "notes.txt")
    ctx.values["corpus"] = str(corpus)


@setup
def damaged_cached_gguf(ctx: Context) -> None:
    """A cached Qwen 0.5B GGUF of the right size and magic whose bytes are damaged.

    Sparse (no disk space taken): zeros after the magic, as a file damaged in place.
    """
    from hyde_lc.models.weights import LOCAL_LLM_WEIGHTS

    weights = LOCAL_LLM_WEIGHTS["qwen2.5-coder-0.5b"]
    cache = ctx.tmp / "cache"
    target = cache / "models" / weights.filename
    target.parent.mkdir(parents=True)
    with target.open("wb") as fh:
        fh.write(b"GGUF")
        fh.truncate(weights.size)  # type: ignore[union-attr]
    ctx.values["cache"] = str(cache)
    ctx.values["gguf"] = str(target)
    ctx.env["HYDE_LC_CACHE_DIR"] = str(cache)


@setup
def gguf_changed_with_its_time_put_back(ctx: Context) -> None:
    """The damaged cached GGUF above, with a verification record that matches its stamp
    (size, time, inode) and says its last full check was two days ago: bytes changed in
    place with the file's time put back look like that."""
    from hyde_lc.models.weights import LOCAL_LLM_WEIGHTS

    damaged_cached_gguf(ctx)
    script = (
        "import json, sys, time\n"
        "from pathlib import Path\n"
        "from hyde_lc.models import weights\n"
        "path = Path(sys.argv[1])\n"
        "weights._write_record(path, sys.argv[2])\n"
        "record = weights._record_path(path)\n"
        "kept = json.loads(record.read_text())\n"
        "record.write_text(json.dumps({**kept, 'checked_at': time.time() - 2 * 86400}))\n"
    )
    sha256 = LOCAL_LLM_WEIGHTS["qwen2.5-coder-0.5b"].sha256  # type: ignore[union-attr]
    subprocess.run(
        [sys.executable, "-c", script, ctx.values["gguf"], sha256],
        env=ctx.env,
        check=True,
        capture_output=True,
        timeout=300,
    )


def _read_only(ctx: Context, root: Path) -> None:
    """``root`` and everything in it made read-only, made writable again at cleanup."""
    paths = [root, *root.rglob("*")]
    for path in paths:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))

    def restore() -> None:
        for path in paths:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)

    ctx.cleanups.append(restore)


@setup
def readonly_store(ctx: Context) -> None:
    """A copy of the sample store with every file and folder read-only."""
    scratch_store(ctx)
    _read_only(ctx, ctx.store)


@setup
def readonly_index(ctx: Context) -> None:
    """A copy of the sample store whose BM25 index folder alone is read-only."""
    scratch_store(ctx)
    lexical = ctx.store / "hyde_lc_lexical"
    _read_only(ctx, lexical)
    ctx.values["lexical"] = str(lexical)


@setup
def notes_file(ctx: Context) -> None:
    """A user's own notes file, the kind a mistyped --out could overwrite."""
    notes = ctx.tmp / "notes.txt"
    notes.write_text("Monday: call the harbour master.\nTuesday: order lamp oil.\n")
    ctx.values["notes"] = str(notes)


@setup
def out_dir(ctx: Context) -> None:
    """An existing folder, given where a file is expected."""
    (ctx.tmp / "results").mkdir()
    ctx.values["out_dir"] = str(ctx.tmp / "results")


def _records(ctx: Context, *extra: str) -> Path:
    records = ctx.tmp / "records.jsonl"
    ctx.hyde_lc(
        "evaluate", str(ctx.session.files / "questions.jsonl"), "--out", str(records),
        "--mode", "standard", "--retrieval-only", *extra,
    )  # fmt: skip
    ctx.values["records"] = str(records)
    return records


@setup
def damaged_records(ctx: Context) -> None:
    """A finished evaluate output with a line in the middle that is not a record."""
    records = _records(ctx)
    first, *rest = records.read_text().splitlines(keepends=True)
    records.write_text(first + "{this line is damaged\n" + "".join(rest))


@setup
def records_k2(ctx: Context) -> None:
    """A finished evaluate output made with --k 2 (a rerun with other settings must not mix)."""
    _records(ctx, "--k", "2")


@setup
def running_evaluate(ctx: Context) -> None:
    """A slow evaluate (HyDE with the local LLM, every sample question) still writing."""
    records = ctx.tmp / "records.jsonl"
    process = subprocess.Popen(
        [
            HYDE_LC, "evaluate", str(SAMPLE_QUESTIONS), "--out", str(records), "--mode", "hyde",
            "--n-hypotheses", "4", "--retrieval-only", "--hypothesis-llm", SMALL_LLM,
        ],
        env=ctx.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    ctx.cleanups.append(lambda: _kill(process))
    deadline = time.monotonic() + 120
    while not records.with_name(records.name + ".lock").exists() and not records.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the background evaluate did not start")
        time.sleep(0.2)
    ctx.values["records"] = str(records)


@setup
def silent_server(ctx: Context) -> None:
    """A TCP port that accepts connections and never answers (a hung endpoint)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()

    def close() -> None:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()

    ctx.cleanups.append(close)
    ctx.values["silent_url"] = f"http://127.0.0.1:{listener.getsockname()[1]}"


@setup
def dead_port(ctx: Context) -> None:
    """A local port with nothing listening (connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ctx.values["dead_url"] = f"http://127.0.0.1:{port}"


# -- running a case ---------------------------------------------------------------------


@dataclass
class Outcome:
    """What one run of a case did, and what did not hold."""

    case: Case
    returncode: int | None
    stdout: str
    stderr: str
    problems: list[str]
    seconds: float

    def report(self) -> str:
        return (
            f"case {self.case.id}: " + "; ".join(self.problems)
            + f"\n--- exit {self.returncode}\n--- stderr:\n{self.stderr[-3000:]}"
            + f"\n--- stdout:\n{self.stdout[-1500:]}"
        )  # fmt: skip


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _fill(text: str, values: dict[str, str]) -> str:
    """Replace ``{name}`` for known names only (a question may hold other braces)."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def _kill(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def permissions_prefix() -> list[str] | None:
    """A command prefix under which file permissions apply; None where there is none.

    Not root: nothing to add. As root (who reads folders and files of any mode),
    ``setpriv`` drops the capabilities that override permissions, where it can.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    if subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        return None
    return prefix


def _run(
    args: list[str], env: dict[str, str], pipe: str | None, timeout: float, prefix: list[str]
) -> tuple:
    """Run the command; stdout into a closed pipe for ``pipe = "closed"``."""
    reader = writer = None
    if pipe == "closed":
        reader, writer = os.pipe()
        os.close(reader)
    process = subprocess.Popen(
        [*prefix, HYDE_LC, *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=writer if writer is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a case that hangs is killed with everything it started
    )
    if writer is not None:
        os.close(writer)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(process)
        out, err = process.communicate()
        return None, out or "", err or ""
    return process.returncode, out or "", err or ""


def skip_reason(case: Case, include_pending: bool = False) -> str | None:
    """Why a case cannot run here (pending, needs another user or a program), or None."""
    if case.pending and not include_pending:
        return f"pending: {case.pending}"
    if "non_root" in case.needs and permissions_prefix() is None:
        return "needs a non-root user, or setpriv (root reads folders and files of any mode)"
    if "chroma" in case.needs and not (Path(sys.executable).parent / "chroma").exists():
        return "needs the `chroma` server command"
    return None


def run_case(case: Case, session: Session, tmp: Path) -> Outcome:
    """Set the case up, run it, and list every expectation that did not hold."""
    values = {
        "store": str(session.store),
        "files": str(session.files),
        "tmp": str(tmp),
        "sample": str(SAMPLE_PDF),
        "sample_questions": str(SAMPLE_QUESTIONS),
        "question": QUESTION,
        "long_question": (QUESTION + " ") * 2600,  # about 100,000 characters
        "digits_5000": "9" * 5000,  # beyond int()'s 4300-digit limit
        "hostile_question": "What is a lens? \x1b]0;pwned\x07 \x1b[2J {context} </s>",
        "not_utf8_question": "What is a lens\udcff?",  # passed on as the raw byte 0xff
        "llm": SMALL_LLM,
    }
    env = {**base_env(), "HYDE_LC_STORE": str(session.store)}
    ctx = Context(session=session, tmp=tmp, values=values, env=env)
    problems: list[str] = []
    started = time.monotonic()
    try:
        for name in case.setup:
            SETUPS[name](ctx)
        env.update({k: _fill(v, values) for k, v in case.env.items()})
        args = [_fill(a, values) for a in case.args]
        same_files = {p: Path(p).read_bytes() for p in (_fill(f, values) for f in case.same_files)}
        before = collection_digest(ctx.store) if case.unchanged is not None else None
        prefix = (permissions_prefix() or []) if "non_root" in case.needs else []
        code, out, err = _run(args, env, case.pipe, case.timeout, prefix)
        after = collection_digest(ctx.store) if case.unchanged is not None else None
    finally:
        for undo in reversed(ctx.cleanups):
            undo()
    seconds = time.monotonic() - started
    if code is None:
        problems.append(f"did not finish within {case.timeout:g} s (killed)")
    elif code != case.exit:
        problems.append(f"exit {code}, expected {case.exit}")
    for fragment in case.stderr:
        if _fill(fragment, values) not in err:
            problems.append(f"stderr lacks {_fill(fragment, values)!r}")
    for fragment in case.stdout:
        if _fill(fragment, values) not in out:
            problems.append(f"stdout lacks {_fill(fragment, values)!r}")
    for fragment in case.not_stdout:
        if _fill(fragment, values) in out:
            problems.append(f"stdout holds {_fill(fragment, values)!r}")
    if "Traceback" in err and "HYDE_LC_DEBUG" not in env:
        problems.append("a traceback on stderr")
    for name, stream in (("stdout", out), ("stderr", err)):
        raw = sorted({f"\\x{ord(c):02x}" for c in stream if c in "\x1b\x07\x9b"})
        if raw:
            problems.append(f"raw control bytes on {name}: {', '.join(raw)}")
    if case.unchanged is True and before != after:
        problems.append("the collection changed")
    if case.unchanged is False and before == after:
        problems.append("the collection did not change")
    for path in case.absent:
        if Path(_fill(path, values)).exists():
            problems.append(f"{_fill(path, values)} exists")
    for path in case.exists:
        if not Path(_fill(path, values)).exists():
            problems.append(f"{_fill(path, values)} does not exist")
    for path, content in same_files.items():
        if not Path(path).is_file() or Path(path).read_bytes() != content:
            problems.append(f"{path} was changed")
    return Outcome(case, code, out, err, problems, seconds)


# -- the table --------------------------------------------------------------------------


@contextlib.contextmanager
def session_in(folder: Path | None = None) -> Iterator[Session]:
    """A session in ``folder`` (or a temporary one, removed afterwards)."""
    if folder is not None:
        yield Session.build(folder)
        return
    with tempfile.TemporaryDirectory(prefix="hyde-lc-matrix-") as tmp:
        yield Session.build(Path(tmp))


def main(argv: list[str] | None = None) -> int:
    """Run the matrix and print one row per case, then the counts; exit 1 if any fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose id contains this text")
    parser.add_argument("--include-pending", action="store_true", help="also run the pending cases")
    args = parser.parse_args(argv)
    cases = [c for c in load_cases() if args.k in c.id]
    counts = dict.fromkeys(("holding", "failing", "pending", "pending, holds", "skipped"), 0)
    width = max(len(c.id) for c in cases)
    with session_in() as session:
        print(f"{'case':{width}}  exit  unchanged  result")
        for case in cases:
            reason = skip_reason(case, args.include_pending)
            if reason:
                counts["pending" if reason.startswith("pending") else "skipped"] += 1
                print(f"{case.id:{width}}  {case.exit:4}  {_flag(case):9}  {reason}")
                continue
            tmp = Path(tempfile.mkdtemp(dir=session.root, prefix="case-"))
            outcome = run_case(case, session, tmp)
            held = not outcome.problems
            if case.pending:
                counts["pending, holds" if held else "pending"] += 1
            else:
                counts["holding" if held else "failing"] += 1
            status = "holds" if held else "FAILS: " + "; ".join(outcome.problems)
            label = f" (pending: {case.pending})" if case.pending else ""
            print(
                f"{case.id:{width}}  {case.exit:4}  {_flag(case):9}  {status}{label}"
                f"  [{outcome.seconds:.1f} s]",
                flush=True,
            )
    print(
        f"\n{len(cases)} cases: {counts['holding']} holding, {counts['failing']} failing, "
        f"{counts['pending'] + counts['pending, holds']} pending"
        + (f" ({counts['pending, holds']} of them hold already)" if args.include_pending else "")
        + f", {counts['skipped']} skipped here"
    )
    return 1 if counts["failing"] else 0


def _flag(case: Case) -> str:
    return {True: "yes", False: "no", None: "-"}[case.unchanged]


if __name__ == "__main__":
    sys.exit(main())
