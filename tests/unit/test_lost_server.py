"""`lost_server`: which failures mean "the Chroma server is gone" (no server needed here)."""

import httpx
import pytest

from hyde_lc.errors import IngestError, StoreUnavailableError
from hyde_lc.retrievers.hyde import HyDERetriever
from hyde_lc.store.location import StoreLocation, lost_server

URL = "http://127.0.0.1:8123"


SERVED = StoreLocation.resolve(url=URL)
EMBEDDED = StoreLocation.resolve(path="/tmp/x")


def _refused(url: str) -> httpx.ConnectError:
    return httpx.ConnectError("[Errno 111] Connection refused", request=httpx.Request("GET", url))


def _wrapped(inner: BaseException) -> IngestError:
    try:
        try:
            raise inner
        except Exception as exc:
            raise IngestError("writing its chunks failed") from exc
    except IngestError as outer:
        return outer


def standard(store) -> HyDERetriever:
    return HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)


def test_server_url_only_for_a_server():
    assert SERVED.server == URL
    assert EMBEDDED.server is None


def test_a_refused_request_to_the_server_even_wrapped_is_a_lost_server():
    lost = lost_server(SERVED, _wrapped(_refused(f"{URL}/api/v2/heartbeat")), "rerun it")
    assert isinstance(lost, StoreUnavailableError)
    message = str(lost)
    assert f"lost the Chroma server at {URL}" in message and "ConnectError" in message
    assert "--port 8123" in message and message.endswith("then rerun it.")


def test_other_failures_are_not_a_lost_server():
    # A remote LLM that cannot be reached is that step's failure, not the store's.
    assert lost_server(SERVED, _wrapped(_refused("https://api.openai.com/v1/chat"))) is None
    assert lost_server(SERVED, _refused("http://127.0.0.1:9999/api")) is None
    assert lost_server(SERVED, ValueError("bad metadata")) is None
    assert lost_server(EMBEDDED, _refused(f"{URL}/api")) is None


def test_an_evaluation_run_stops_at_a_lost_server_and_resumes(tmp_path, store, monkeypatch):
    from hyde_lc.evaluation.records import EvaluationPipeline
    from hyde_lc.evaluation.runs import evaluate_questions, read_questions, read_records

    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(f'{{"question": "lamp {i}?"}}\n' for i in range(4)), "utf-8")
    asked = read_questions(questions)

    class ServerDiesAfter(EvaluationPipeline):
        def __init__(self, n, retriever):
            super().__init__(retriever)
            self.left = n

        def run(self, question, **kwargs):
            if self.left == 0:
                raise _wrapped(_refused(f"{URL}/api/v2/query"))
            self.left -= 1
            return super().run(question, **kwargs)

    # The embedded test store stands in for a server at URL.
    monkeypatch.setattr(StoreLocation, "server", property(lambda _: URL))
    out = tmp_path / "out.jsonl"
    dying = ServerDiesAfter(2, standard(store))
    with pytest.raises(StoreUnavailableError, match=r"keeps the 2 records in .*out\.jsonl"):
        evaluate_questions(asked, dying, out, progress=False)
    assert [r["user_input"] for r in read_records(out)] == ["lamp 0?", "lamp 1?"]

    again = EvaluationPipeline(standard(store))  # retrieval only: no answer model
    summary = evaluate_questions(asked, again, out, progress=False)
    assert (summary.done, summary.skipped, summary.failed) == (2, 2, 0)
    assert [r["user_input"] for r in read_records(out)] == [f"lamp {i}?" for i in range(4)]


def test_other_failures_are_still_recorded_per_question(tmp_path, store):
    from hyde_lc.evaluation.records import EvaluationPipeline
    from hyde_lc.evaluation.runs import evaluate_questions, read_questions, read_records

    questions = tmp_path / "q.jsonl"
    questions.write_text('{"question": "a?"}\n{"question": "b?"}\n', "utf-8")

    class Refused(EvaluationPipeline):
        def run(self, question, **kwargs):
            raise _wrapped(_refused("https://api.openai.com/v1/chat"))

    pipeline = Refused(standard(store))
    out = tmp_path / "out.jsonl"
    summary = evaluate_questions(read_questions(questions), pipeline, out, progress=False)
    assert summary.failed == 2
    assert all("IngestError" in r["metadata"]["error"] for r in read_records(out))
