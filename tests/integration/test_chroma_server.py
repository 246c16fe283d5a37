"""Client/server mode against a real `chroma run` on 127.0.0.1, started by the fixture."""

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hyde_lc import HyDERetriever, collection_info, ingest_paths, load_llm, open_store
from hyde_lc.errors import StoreError
from tests.conftest import SAMPLE_PDF

pytestmark = pytest.mark.integration
CHROMA = shutil.which("chroma") or str(Path(sys.executable).parent / "chroma")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    if not Path(CHROMA).exists():
        pytest.skip("the `chroma` command (chromadb's server) is not installed")
    port = _free_port()
    proc = subprocess.Popen(
        [
            CHROMA,
            "run",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--path",
            str(tmp_path_factory.mktemp("chroma-server")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("chroma server did not start within 60 s")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


def test_ingest_and_hyde_retrieval_through_a_server(server_url):
    store = open_store(url=server_url, collection="served")
    report = ingest_paths([SAMPLE_PDF], store, progress=False)
    assert report.files[0].status == "added"
    again = ingest_paths(
        [SAMPLE_PDF], open_store(url=server_url, collection="served"), progress=False
    )
    assert again.files[0].status == "unchanged"
    info = collection_info(open_store(url=server_url, collection="served"))
    assert info["embedding_model"] == "local:minilm" and info["chunks"] > 20
    writer = load_llm("local:smollm2-135m", role="hypothesis", max_tokens=48)
    result = HyDERetriever(vectorstore=store, hypothesis_llm=writer, k=3).retrieve_with_details(
        "Who designed the Pharos of Alexandria?"
    )
    assert result.fallback is None and len(result.documents) == 3


def test_a_server_that_is_down_gives_a_clear_error():
    with pytest.raises(StoreError, match="cannot reach the Chroma server"):
        open_store(url=f"http://127.0.0.1:{_free_port()}")
