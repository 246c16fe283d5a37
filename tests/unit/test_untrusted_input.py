"""Untrusted input: symbolic links out of the ingested folder, PDFs that inflate."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyde_lc.errors import IngestError
from hyde_lc.ingest.files import ingest_paths
from hyde_lc.ingest.reading import DEFAULT_LIMITS, InputLimits, find_files, load_document, scan_file
from hyde_lc.store.vectorstore import open_store
from tests.fakes import chroma_of, long_text
from tests.hostile_pdfs import content_pdf, zip_bomb_pdf

# -- symbolic links -------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Files outside the corpus: a secret with no suffix, and a document named .txt."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n" * 5)
    (folder / "elsewhere.txt").write_text(long_text(3, "elsewhere"))
    return folder


@pytest.fixture
def corpus(tmp_path: Path, outside: Path) -> Path:
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "own.txt").write_text(long_text(4, "own"))
    (folder / "passwd.txt").symlink_to(outside / "passwd")
    (folder / "elsewhere.txt").symlink_to(outside / "elsewhere.txt")
    (folder / "sub" / "alias.txt").symlink_to(folder / "own.txt")  # inside: harmless
    (folder / "linked").symlink_to(outside, target_is_directory=True)
    return folder


def test_a_link_out_of_the_folder_is_skipped_and_says_why(corpus, outside):
    found = find_files([corpus])
    assert found.files == [(corpus / "own.txt").resolve()]
    reasons = {Path(s.path).name: s.reason for s in found.skipped}
    assert set(reasons) == {"passwd.txt", "elsewhere.txt", "linked"}
    assert f"symbolic link to {outside / 'passwd'}, outside {corpus}" in reasons["passwd.txt"]
    assert "--follow-links" in reasons["elsewhere.txt"]
    assert reasons["linked"].startswith("folder skipped: it is a symbolic link")


def test_following_links_still_judges_the_type_by_the_target(corpus, outside):
    found = find_files([corpus], follow_links=True)
    assert sorted(p.name for p in found.files) == ["elsewhere.txt", "own.txt"]
    assert outside / "passwd" not in found.files
    reasons = {Path(s.path).name: s.reason for s in found.skipped}
    assert set(reasons) == {"passwd.txt"}
    assert "not a supported file" in reasons["passwd.txt"]


def test_followed_folder_links_that_loop_are_walked_once(tmp_path):
    folder = tmp_path / "loop"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.txt").write_text(long_text(2, "a"))
    (folder / "sub" / "up").symlink_to(folder, target_is_directory=True)
    found = find_files([folder], follow_links=True)
    assert found.files == [(folder / "sub" / "a.txt").resolve()]


def test_a_link_given_by_name_is_judged_by_its_target(tmp_path, outside):
    link = tmp_path / "passwd.txt"
    link.symlink_to(outside / "passwd")
    with pytest.raises(IngestError, match=r"symbolic link to .*passwd, which is not a supported"):
        find_files([link])


def test_ingest_never_stores_the_target_of_a_link_out_of_the_folder(
    tmp_path, corpus, fake_embeddings
):
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    report = ingest_paths([corpus], store, progress=False)
    status = {Path(f.source).name: f.status for f in report.files}
    assert status == {
        "own.txt": "added",
        "passwd.txt": "skipped",
        "elsewhere.txt": "skipped",
        "linked": "skipped",
    }
    sources = {meta["source"] for _, meta in chroma_of(store).metadatas()}
    assert sources == {str((corpus / "own.txt").resolve())}


# -- PDFs that cost far more to read than their size ------------------------------------------


def test_pages_sharing_one_huge_stream_are_refused_before_any_parsing(tmp_path):
    # 20 KB on disk; 100 pages each parse the same 1 MB stream (minutes of pypdf before).
    pdf = content_pdf(tmp_path / "shared.pdf", 1_000_000, pages=100)
    assert pdf.stat().st_size < 50_000
    with pytest.raises(IngestError) as refused:
        scan_file(pdf)
    message = str(refused.value)
    assert "above the limit of 64.0 MB per file" in message
    assert "--max-pdf-mb" in message and "InputLimits(max_pdf_bytes=" in message


def test_one_page_of_inflated_content_is_refused_naming_the_page_limit(tmp_path):
    pdf = content_pdf(tmp_path / "page.pdf", 5_000_000)
    assert pdf.stat().st_size < 50_000
    with pytest.raises(IngestError, match=r"page 1 draws its text from 4\.8 MB .* per page"):
        scan_file(pdf)
    with pytest.raises(IngestError, match="--max-pdf-page-mb"):
        load_document(pdf)


def test_a_page_yielding_too_much_text_is_refused_and_the_limit_can_be_raised(tmp_path):
    pdf = content_pdf(tmp_path / "wordy.pdf", 20_000)  # one page, about 11,000 characters
    with pytest.raises(IngestError, match=r"page 1 yields [\d,]+ characters .* --max-page-chars"):
        scan_file(pdf, limits=InputLimits(max_page_chars=5_000))
    with pytest.raises(IngestError, match=r"above the limit of 5,000 per PDF.*--max-pdf-chars"):
        scan_file(pdf, limits=InputLimits(max_pdf_chars=5_000))
    assert scan_file(pdf, keep_up_to=1e9).length > 5_000  # within the defaults


def test_a_decompression_bomb_is_named_as_such_not_as_a_damaged_download(tmp_path):
    pdf = zip_bomb_pdf(tmp_path / "bomb.pdf")
    assert pdf.stat().st_size < 100_000
    with pytest.raises(IngestError) as refused:
        scan_file(pdf)
    assert "decompression bomb" in str(refused.value)
    assert "damaged or truncated" not in str(refused.value)


def test_a_file_making_too_many_chunks_fails_the_ingest_before_any_write(tmp_path, fake_embeddings):
    (tmp_path / "long.txt").write_text(long_text(40, "long"))
    store = open_store(tmp_path / "store", embeddings=fake_embeddings)
    with pytest.raises(IngestError, match=r"chunks per file.*--max-chunks-per-file"):
        ingest_paths(
            [tmp_path / "long.txt"],
            store,
            chunk_size=100,
            chunk_overlap=0,
            progress=False,
            limits=InputLimits(max_chunks=10),
        )
    assert not (tmp_path / "store").exists()


def test_the_cli_help_states_the_library_defaults():
    from hyde_lc.cli import build_parser
    from hyde_lc.cli.collection import input_limits

    args = build_parser().parse_args(["ingest", "x"])
    assert input_limits(args) == DEFAULT_LIMITS
    parser = build_parser()._subparsers._group_actions[0].choices["ingest"]  # type: ignore[union-attr]
    help_text = " ".join(parser.format_help().split())
    assert f"(default: {DEFAULT_LIMITS.max_pdf_page_bytes // 2**20})" in help_text
    assert f"(default: {DEFAULT_LIMITS.max_pdf_bytes // 2**20})" in help_text
    for value in (DEFAULT_LIMITS.max_page_chars, DEFAULT_LIMITS.max_pdf_chars):
        assert f"(default: {value})" in help_text
    assert f"(default: {DEFAULT_LIMITS.max_chunks})" in help_text


# -- settings from the environment -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "raw", "allowed"),
    [
        ("HYDE_LC_N_CTX", "100000000", "from 256 to 131,072"),
        ("HYDE_LC_N_CTX", "lots", "from 256 to 131,072"),
        ("HYDE_LC_THREADS", "abc", "from 0 to 256"),
        ("HYDE_LC_THREADS", "2000", "from 0 to 256"),
        ("HYDE_LC_THREADS", "-1", "from 0 to 256"),
        ("HYDE_LC_REFRESH_INTERVAL", "nan", "from 0 to 3600"),
        ("HYDE_LC_REFRESH_INTERVAL", "1e9", "from 0 to 3600"),
    ],
)
def test_a_bad_setting_names_the_variable_the_value_and_the_range(monkeypatch, name, raw, allowed):
    from hyde_lc.errors import InvalidSettingError
    from hyde_lc.models.local_llm import _default_threads, default_context_size
    from hyde_lc.models.multilingual_embeddings import _default_threads as e5_threads
    from hyde_lc.store.collection import refresh_interval

    monkeypatch.setenv(name, raw)
    readers = {
        "HYDE_LC_N_CTX": [default_context_size],
        "HYDE_LC_THREADS": [_default_threads, e5_threads],
        "HYDE_LC_REFRESH_INTERVAL": [refresh_interval],
    }[name]
    for read in readers:
        with pytest.raises(InvalidSettingError) as refused:
            read()
        assert f"{name}={raw!r} is not valid" in str(refused.value)
        assert allowed in str(refused.value)


def test_settings_within_their_range_are_used(monkeypatch):
    from hyde_lc.models.local_llm import _default_threads, default_context_size
    from hyde_lc.models.multilingual_embeddings import _default_threads as e5_threads
    from hyde_lc.store.collection import refresh_interval

    monkeypatch.setenv("HYDE_LC_N_CTX", "8192")
    monkeypatch.setenv("HYDE_LC_THREADS", "3")
    monkeypatch.setenv("HYDE_LC_REFRESH_INTERVAL", "0")
    assert (default_context_size(), _default_threads(), e5_threads()) == (8192, 3, 3)
    assert refresh_interval() == 0
    monkeypatch.setenv("HYDE_LC_THREADS", " ")  # blank: the default
    assert _default_threads() >= 1


def test_the_local_model_refuses_a_huge_context_before_loading_anything(monkeypatch):
    from hyde_lc.errors import InvalidSettingError
    from hyde_lc.models.loading import load_llm

    monkeypatch.setenv("HYDE_LC_N_CTX", "100000000")
    with pytest.raises(InvalidSettingError, match="HYDE_LC_N_CTX"):
        load_llm("local:smollm2-135m")


# -- text that is not valid Unicode in the CLI -------------------------------------------------


def test_a_question_holding_a_byte_that_is_not_utf8_is_a_usage_error(capsys):
    from hyde_lc.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["ask", "What is a lens\udcff?"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "argument question: byte 0xff at character 15 is not valid UTF-8" in err
    assert "Traceback" not in err


def test_a_lone_surrogate_met_by_a_command_is_a_mistake_to_fix_not_a_crash(monkeypatch, capsys):
    import hyde_lc.cli.collection as collection
    from hyde_lc.cli import main

    def info(args):
        return "lens \ud800?".encode()

    monkeypatch.setattr(collection, "cmd_info", info)
    assert main(["info"]) == 2
    err = capsys.readouterr().err
    assert "a lone surrogate (U+D800) at character 6 is not valid Unicode" in err
    assert "UnicodeEncodeError" not in err


def test_add_texts_replaces_lone_surrogates_and_says_so(tmp_path, caplog):
    from hyde_lc import open_store
    from tests.fakes import FakeEmbeddings

    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=16))
    with caplog.at_level("WARNING", logger="hyde_lc.store.vectorstore"):
        ids = store.add_texts(
            ["lamp \ud800 keeper"], metadatas=[{"source": "a\udc80.txt"}], ids=["x\ud800"]
        )
    assert ids == ["x\ufffd"]  # the id the chunk is stored under
    got = store.get(ids=ids)
    assert got["documents"] == ["lamp \ufffd keeper"]
    assert got["metadatas"][0]["source"] == "a\ufffd.txt"
    assert "3 lone surrogate(s)" in caplog.text
    assert [d.id for d in store.similarity_search("lamp keeper", k=1)] == ids


def test_a_file_name_that_is_not_utf8_is_skipped_in_a_folder_and_refused_by_name(tmp_path):
    import os

    from hyde_lc import open_store
    from tests.fakes import FakeEmbeddings

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.txt").write_text("the lamp keeper trimmed the wick", encoding="utf-8")
    bad = Path(os.fsdecode(os.fsencode(folder) + b"/caf\xe9.txt"))
    bad.write_text("the fog bell rang at dusk", encoding="utf-8")
    store = open_store(tmp_path / "store", embeddings=FakeEmbeddings(size=16))
    report = ingest_paths([folder], store, progress=False)
    by_status = {f.status: f for f in report.files}
    assert by_status["added"].source.endswith("good.txt")
    assert "caf\\xe9.txt" in by_status["skipped"].source
    assert "not valid UTF-8" in by_status["skipped"].notes[0]
    with pytest.raises(IngestError, match=r"caf\\xe9\.txt: its name is not valid UTF-8"):
        ingest_paths([bad], store, progress=False)
