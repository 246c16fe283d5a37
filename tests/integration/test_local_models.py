import asyncio
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.messages import HumanMessage

from hyde_lc import load_embeddings, load_llm
from hyde_lc.answer import answer_with_context
from hyde_lc.hyde.hypotheses import write_hypotheses
from hyde_lc.models.local_llm import _ENGINES, ContextWindowError, LocalChatModel, estimate_tokens

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def minilm():
    return load_embeddings("local:minilm")


@pytest.fixture(scope="module")
def smol():
    return load_llm("local:smollm2-135m", role="answer", max_tokens=24)


def test_minilm_vectors_are_unit_length_and_semantic(minilm):
    lens, bees = minilm.embed_documents(
        ["A Fresnel lens bends lamp light into a beam.", "Bees pollinate flowers."]
    )
    query = minilm.embed_query("How does a lighthouse lens focus light?")
    assert len(query) == 384
    assert np.linalg.norm(query) == pytest.approx(1.0, abs=1e-5)
    assert np.dot(query, lens) > np.dot(query, bees) + 0.2


def test_minilm_padding_does_not_change_vectors(minilm):
    short = "Lighthouse."
    alone = minilm.embed_query(short)
    batched = minilm.embed_documents([short, "a much longer text " * 40])[0]
    assert np.dot(alone, batched) == pytest.approx(1.0, abs=1e-5)


def test_minilm_reads_its_full_256_token_window(minilm):
    assert minilm.count_tokens("word " * 1000) == 256
    head = "lighthouse keeper " * 60  # ~120 tokens: beyond 128, inside 256
    a = minilm.embed_query(head + "bees honey hive " * 20)
    b = minilm.embed_query(head + "volcano magma lava " * 20)
    assert np.dot(a, b) < 0.999  # text after token 128 still counts


def test_local_chat_model_reports_usage(smol):
    message = smol.invoke("Name one colour of the rainbow.")
    usage = message.usage_metadata
    assert usage["input_tokens"] > 5 and 0 < usage["output_tokens"] <= 24
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert message.response_metadata["model_name"] == "smollm2-135m"
    assert message.text.strip()


def test_temperature_zero_is_deterministic_and_sampling_varies(smol):
    prompt = "Write one sentence about the sea."
    assert smol.invoke(prompt).text == smol.invoke(prompt).text
    sampler = load_llm("local:smollm2-135m", role="hypothesis", max_tokens=24)
    outputs = {sampler.invoke(prompt).text for _ in range(3)}
    assert len(outputs) >= 2


def test_the_dry_sampler_reaches_llama_cpp():
    # Greedy SmolLM2 copies the prompt's sentence verbatim; DRY penalises extending a
    # sequence already in the context, so with it on the copy breaks off.
    sentence = "The keeper climbed the stairs to light the lamp."
    prompt = f"Write one line per item, each line saying '{sentence}'"
    plain = load_llm("local:smollm2-135m", role="answer", max_tokens=32)
    dry = load_llm("local:smollm2-135m", role="answer", max_tokens=32, dry_multiplier=0.8)
    assert sentence in plain.invoke(prompt).text
    assert sentence not in dry.invoke(prompt).text


def test_both_roles_share_one_engine(smol):
    writer = load_llm("local:smollm2-135m", role="hypothesis")
    writer.invoke("hi", max_tokens=2)
    smol.invoke("hi", max_tokens=2)
    assert writer._engine() is smol._engine()  # one loaded copy for both roles
    assert len(_ENGINES) == len(set(_ENGINES))


def test_streaming_yields_text_and_final_usage(smol):
    chunks = list(smol.stream("Count from one to five."))
    text = "".join(c.text for c in chunks)
    assert len([c for c in chunks if c.text]) > 2
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert merged.text == text
    assert merged.usage_metadata["output_tokens"] > 0


async def test_abatch_runs_several_requests(smol):
    replies = await smol.abatch(["Say A.", "Say B.", "Say C."])
    assert len(replies) == 3 and all(r.usage_metadata["output_tokens"] > 0 for r in replies)


def test_local_embeddings_leave_no_telemetry_behind(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # CI variables also switch onnxruntime's telemetry off: clear them so the test sees
    # what a user's machine does.
    ci = {"CI", "GITHUB_ACTIONS", "GITLAB_CI", "TF_BUILD", "BUILDKITE", "JENKINS_URL"}
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ci and not k.startswith("ORT_") and k != "XDG_CACHE_HOME"
    }
    env["HOME"] = str(home)
    script = (
        "from hyde_lc import open_store, load_embeddings\n"  # chromadb imported first
        "vector = load_embeddings('local:minilm').embed_query('A lighthouse keeper.')\n"
        "assert len(vector) == 384\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert not (home / ".cache" / "Microsoft").exists(), sorted(p.name for p in home.rglob("*"))


class Endless(LocalChatModel):
    """SmolLM2 that ignores end-of-sequence: every request runs to ``max_tokens``."""

    def _request(self, messages, stop, **kwargs):
        return {**super()._request(messages, stop, **kwargs), "ignore_eos": True}


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_timed_out_batch_is_cancelled_and_frees_the_engine(smol):
    writer = Endless(
        model_path=smol.model_path, model_name="smollm2-135m", temperature=0.7, max_tokens=2048
    )
    assert writer._engine() is smol._engine()  # the same engine serves the next call
    before = smol.engine_metrics()["tokens_predicted_total"]
    abandoned = 16 * 2048  # tokens the batch would generate if nobody stopped it
    out = write_hypotheses(writer, ["Tell a long story about a lighthouse."] * 16, timeout=1.0)
    assert out.fallback == "timeout after 1.0s" and out.texts == []
    # (the wait only guards against a hang: cancelled requests end within a step)
    assert _wait_for(lambda: smol.engine_metrics()["requests_processing"] == 0, 120)
    spent = smol.engine_metrics()["tokens_predicted_total"] - before
    assert spent < abandoned / 20, spent
    reply = smol.invoke("Name one colour.", max_tokens=8)
    assert 0 < reply.usage_metadata["output_tokens"] <= 8
    assert smol.engine_metrics()["tokens_predicted_total"] - before < abandoned / 20


def test_a_stream_left_early_stops_its_request(smol):
    writer = Endless(model_path=smol.model_path, model_name="smollm2-135m", max_tokens=2048)
    before = smol.engine_metrics()["tokens_predicted_total"]
    stream = writer.stream("Tell a long story about a lighthouse.")
    assert next(stream).content is not None
    stream.close()
    assert _wait_for(lambda: smol.engine_metrics()["requests_processing"] == 0, 120)
    assert smol.engine_metrics()["tokens_predicted_total"] - before < 200


async def test_a_cancelled_async_call_stops_its_request(smol):
    writer = Endless(model_path=smol.model_path, model_name="smollm2-135m", max_tokens=2048)
    before = smol.engine_metrics()["tokens_predicted_total"]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(writer.ainvoke("Tell a long story about a lighthouse."), 1.0)
    assert await asyncio.to_thread(
        _wait_for, lambda: smol.engine_metrics()["requests_processing"] == 0, 120
    )
    assert smol.engine_metrics()["tokens_predicted_total"] - before < 400


def test_a_prompt_over_the_window_says_how_to_raise_it(smol):
    with pytest.raises(ContextWindowError, match="HYDE_LC_N_CTX"):
        smol.invoke("lighthouse " * 5000)


def test_token_counts_come_from_the_models_own_tokenizer(smol):
    text = "The keeper climbed the tower at dusk."
    assert 5 <= smol.get_num_tokens(text) < estimate_tokens(text)
    message = smol.invoke(text, max_tokens=1)
    assert (
        smol.get_num_tokens_from_messages([HumanMessage(text)])
        == (message.usage_metadata["input_tokens"])
    )


def test_long_context_is_fitted_to_the_local_answer_window(smol):
    from pypdf import PdfReader

    from tests.fakes import SAMPLE_PDF

    text = " ".join(page.extract_text() for page in PdfReader(SAMPLE_PDF).pages)
    # Eight 5,000-character windows, as `ask --window 2` builds from the sample: about
    # 10,000 tokens, well over the 4,096-token window.
    meta = {"file_name": "lighthouses.pdf"}
    docs = [Document(text[i * 1500 : i * 1500 + 5000], metadata=meta) for i in range(8)]
    assert all(len(d.page_content) == 5000 for d in docs)
    out = answer_with_context(smol).invoke(
        {"question": "Who invented the Fresnel lens?", "documents": docs}
    )
    assert isinstance(out["answer"], str)
    assert out["context_note"] and "passages left out" in out["context_note"]
    assert out["context_documents"] == docs[: len(out["context_documents"])]
    assert out["context_documents"] + out["dropped_documents"] == docs


def test_the_process_exits_cleanly_while_a_generation_runs(smol):
    # A token callback that fires while the interpreter finalises would crash it.
    script = (
        "import threading, time\n"
        "from tests.integration.test_local_models import Endless\n"
        f"llm = Endless(model_path={smol.model_path!r}, max_tokens=3000)\n"
        "threading.Thread(target=llm.invoke, args=('Tell a long story.',), daemon=True).start()\n"
        "deadline = time.monotonic() + 120\n"
        "while llm.engine_metrics()['n_decode_total'] < 3 and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "busy = llm.engine_metrics()['requests_processing']\n"
        "time.sleep(0.5)\n"
        "print('leaving', busy, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "leaving 1.0"
