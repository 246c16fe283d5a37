"""A long-lived reader sees another process's writes after `refresh_store`.

Embedded Chroma loads a collection's vector index once per process: the reload goes
through chromadb's public ``clear_system_cache`` and a new client (no Rust bindings
restarted by hand).
"""

import subprocess
import sys

from hyde_lc.store.vectorstore import open_store, refresh_store
from tests.fakes import FakeEmbeddings

WRITER = """
import sys
from hyde_lc.store.vectorstore import open_store
from tests.fakes import FakeEmbeddings
store = open_store(sys.argv[1], embeddings=FakeEmbeddings(size=32))
store.add_texts(["the clockwork was wound by the second keeper"], ids=["late"])
"""


def test_refresh_shows_what_another_process_wrote(tmp_path):
    folder = tmp_path / "store"
    store = open_store(folder, embeddings=FakeEmbeddings(size=32))
    store.add_texts([f"the lamp room, note {i}" for i in range(20)])
    text = "the clockwork was wound by the second keeper"
    assert [d.id for d in store.similarity_search(text, k=1)] != ["late"]  # index loaded
    subprocess.run([sys.executable, "-c", WRITER, str(folder)], check=True, timeout=120)
    before = [d.id for d in store.similarity_search(text, k=1)]
    refresh_store(store)
    assert [d.id for d in store.similarity_search(text, k=1)] == ["late"]
    assert before != ["late"]  # the view this process had: what the refresh is for
    store.add_texts(["one more note"], ids=["mine"])  # writes build on the fresh view
    again = open_store(folder, embeddings=FakeEmbeddings(size=32))
    assert {"late", "mine"} <= set(again.get(include=[])["ids"])
    assert [d.id for d in again.similarity_search(text, k=1)] == ["late"]
