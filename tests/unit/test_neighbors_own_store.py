"""Windows over a user's own store: chunks from LangChain's splitter, one contract everywhere."""

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_community.docstore.in_memory import InMemoryDocstore
from langchain_community.document_loaders import PyPDFLoader, TextLoader
from langchain_community.vectorstores import FAISS
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

from hyde_lc import NeighborExpandingRetriever
from tests.fakes import SAMPLE_PDF, FakeEmbeddings, FixedHits, unique_text


def split(docs: list[Document], size: int = 200) -> list[Document]:
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=size, chunk_overlap=size // 5, add_start_index=True
    )
    return splitter.split_documents(docs)


@pytest.fixture(scope="module")
def text_chunks(tmp_path_factory) -> tuple[list[Document], str]:
    path = tmp_path_factory.mktemp("docs") / "harbours.txt"
    path.write_text(unique_text("harbour", 6))
    (doc,) = TextLoader(str(path)).load()
    return split([doc]), doc.page_content


def plain_chroma(chunks: list[Document], tmp_path) -> Chroma:
    client = chromadb.PersistentClient(path=str(tmp_path / "theirs"))
    ids = [f"c{i}" for i in range(len(chunks))]
    return Chroma.from_documents(
        chunks, FakeEmbeddings(size=32), ids=ids, client=client, collection_name="theirs"
    )


def in_memory(chunks: list[Document]) -> InMemoryVectorStore:
    store = InMemoryVectorStore(FakeEmbeddings(size=32))
    store.add_documents(chunks, ids=[f"c{i}" for i in range(len(chunks))])
    return store


def faiss(chunks: list[Document]) -> FAISS:
    """LangChain's FAISS store as FAISS.add_documents fills its docstore (no faiss needed
    to read chunks back)."""
    held = {f"c{i}": Document(d.page_content, metadata=d.metadata, id=f"c{i}")
            for i, d in enumerate(chunks)}  # fmt: skip
    return FAISS(FakeEmbeddings(size=32), None, InMemoryDocstore(held), dict(enumerate(held)))


def expand(store, hit_ids: list[str], **kwargs) -> list[Document]:
    hits = store.get_by_ids(hit_ids)
    hits.sort(key=lambda d: hit_ids.index(d.id))
    return NeighborExpandingRetriever(
        base_retriever=FixedHits(hits=hits), vectorstore=store, **kwargs
    ).invoke("q")


def test_a_plain_chroma_collection_of_splitter_chunks_gives_windows(text_chunks, tmp_path):
    chunks, text = text_chunks
    store = plain_chroma(chunks, tmp_path)
    (window,) = expand(store, ["c4"], k=1, window=1)
    assert (window.metadata["window_start"], window.metadata["window_end"]) == (3, 5)
    assert window.metadata["hit_chunk_index"] == 4 and "neighbors_note" not in window.metadata
    start = chunks[3].metadata["start_index"]
    end = chunks[5].metadata["start_index"] + len(chunks[5].page_content)
    # the document's text over the span (the splitter's dropped whitespace read as a space)
    assert window.page_content.split() == text[start:end].split()
    assert window.metadata["start_index"] == start


def test_every_store_gives_the_same_windows(text_chunks, tmp_path):
    chunks, _ = text_chunks
    stores = [plain_chroma(chunks, tmp_path), in_memory(chunks), faiss(chunks)]
    results = [expand(s, ["c2", "c8", "c3"], k=2, before=1, after=2) for s in stores]
    spans = [[(d.metadata["window_start"], d.metadata["window_end"]) for d in r] for r in results]
    last = len(chunks) - 1
    assert spans[0] == [(1, 4), (7, min(10, last))]
    assert spans[1:] == spans[:1] * 2
    assert [d.page_content for d in results[1]] == [d.page_content for d in results[0]]
    assert [d.page_content for d in results[2]] == [d.page_content for d in results[0]]


def test_pdf_pages_split_one_by_one_give_windows_within_a_page(tmp_path):
    pages = PyPDFLoader(str(SAMPLE_PDF)).load()
    chunks = split(pages, size=300)
    store = plain_chroma(chunks, tmp_path)
    # a chunk in the middle of page 1 (0-based: the second page), its offsets from 0 again
    on_page = [i for i, c in enumerate(chunks) if c.metadata["page"] == 1]
    hit = on_page[len(on_page) // 2]
    (window,) = expand(store, [f"c{hit}"], k=1, window=1)
    assert "neighbors_note" not in window.metadata
    assert window.metadata["pages"] == [1] and window.metadata["page_label"] == "2"
    first, last = chunks[hit - 1], chunks[hit + 1]
    page_text = pages[1].page_content
    span = page_text[
        first.metadata["start_index"] : last.metadata["start_index"] + len(last.page_content)
    ]
    assert window.page_content.split() == span.split()


def test_chunks_of_other_parent_documents_are_never_mixed_in(tmp_path):
    # two documents under one source, told apart by their metadata (e.g. a loader's rows)
    rows = [
        Document(unique_text(f"row{n}", 2), metadata={"source": "table.csv", "row": n})
        for n in range(2)
    ]
    chunks = split(rows)
    store = in_memory(chunks)
    (window,) = expand(store, ["c0"], k=1, window=5)
    row0 = [c for c in chunks if c.metadata["row"] == 0]
    assert window.metadata["window_end"] == len(row0) - 1
    assert "row1" not in window.page_content and window.metadata["row"] == 0
