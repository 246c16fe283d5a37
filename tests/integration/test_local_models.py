import numpy as np
import pytest

from hyde_lc import load_embeddings, load_llm
from hyde_lc.local_llm import _ENGINES

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
