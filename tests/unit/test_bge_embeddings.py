"""bge-small-en-v1.5 on fakes: the query prefix, CLS pooling, and how missing or damaged
weights are refused. The real model runs in tests/integration/test_bge_embeddings.py."""

from dataclasses import dataclass

import numpy as np
import pytest
from pydantic import ValidationError

import hyde_lc.models.weights as weights
from hyde_lc.errors import ModelFileError, ModelNotInstalledError, WeightChecksumError
from hyde_lc.models.bge_embeddings import (
    BGE_ONNX,
    BGE_QUERY_PREFIX,
    BGE_SHA256,
    BGE_TOKENIZER,
    BgeSmallEmbeddings,
)
from hyde_lc.models.loading import load_embeddings
from hyde_lc.models.local_embeddings import MiniLMEmbeddings


@dataclass
class Encoding:
    ids: list[int]
    attention_mask: list[int]


class FakeTokenizer:
    """One token per word (id = word length), padded to the longest text of the batch."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def encode_batch(self, texts: list[str]) -> list[Encoding]:
        self.seen.extend(texts)
        words = [t.split() for t in texts]
        width = max(len(w) for w in words)
        return [
            Encoding(
                [len(x) for x in w] + [0] * (width - len(w)), [1] * len(w) + [0] * (width - len(w))
            )
            for w in words
        ]


class FakeSession:
    """Hidden state of token i in dimension 0..2: (3, 4, 0) for the first token, then
    (i * 100 + id, 0, 1) for the others, padding included."""

    def run(self, outputs, feeds):
        assert outputs == ["last_hidden_state"]
        assert set(feeds) == {"input_ids", "attention_mask", "token_type_ids"}
        ids = feeds["input_ids"]
        hidden = np.zeros((*ids.shape, 384), dtype=np.float32)
        hidden[:, :, 0] = np.arange(ids.shape[1]) * 100 + ids
        hidden[:, :, 2] = 1.0
        hidden[:, 0, :3] = (3.0, 4.0, 0.0)
        return [hidden]


def with_fakes(embeddings):
    tokenizer = FakeTokenizer()
    embeddings._session = embeddings._query_session = FakeSession()
    embeddings._tokenizer = tokenizer
    return embeddings, tokenizer


def test_queries_get_the_instruction_and_documents_do_not():
    emb, tokenizer = with_fakes(BgeSmallEmbeddings())
    emb.embed_query("what is a lens")
    emb.embed_documents(["a lens bends light", "bees make honey"])
    assert tokenizer.seen[0] == BGE_QUERY_PREFIX + "what is a lens"
    assert sorted(tokenizer.seen[1:]) == ["a lens bends light", "bees make honey"]


def test_the_vector_is_the_first_tokens_state_at_unit_length():
    emb, _ = with_fakes(BgeSmallEmbeddings())
    short, long = emb.embed_documents(["one", "one two three four"])
    expected = [0.6, 0.8, 0.0]
    assert short[:3] == pytest.approx(expected) and long[:3] == pytest.approx(expected)
    assert np.linalg.norm(short) == pytest.approx(1.0)
    assert not any(short[3:])


def test_minilm_still_averages_over_the_unpadded_tokens_and_has_no_query_prefix():
    emb, tokenizer = with_fakes(MiniLMEmbeddings())
    short = np.array(emb.embed_documents(["one two", "one two three four five"])[0])
    # tokens 0 and 1 of "one two": (3, 4, 0) and (100 + 3, 0, 1); padding left out
    mean = np.array([(3 + 103) / 2, 2.0, 0.5])
    assert short[:3] == pytest.approx(mean / np.linalg.norm(mean), abs=1e-6)
    emb.embed_query("what is a lens")
    assert tokenizer.seen[-1] == "what is a lens"


def test_a_window_beyond_the_models_512_positions_is_refused():
    with pytest.raises(ValidationError, match="512"):
        BgeSmallEmbeddings(max_tokens=1024)


def test_missing_weights_are_refused_when_the_model_is_chosen(monkeypatch):
    monkeypatch.setattr(weights, "package_dir", lambda module: None)
    with pytest.raises(ModelNotInstalledError, match=r"requirements/models-bge\.txt"):
        load_embeddings("local:bge-small-en-v1.5")


def test_weights_of_another_release_fail_their_checksum(monkeypatch, tmp_path):
    for file in (BGE_ONNX, BGE_TOKENIZER):
        (tmp_path / file.filename).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file.filename).write_bytes(b"not the published file")
    monkeypatch.setattr(weights, "package_dir", lambda module: tmp_path)
    # refused when the files are first read (the weights check at loading, or the
    # embedder's own at first use), naming the published checksum
    with pytest.raises((ModelFileError, WeightChecksumError), match=BGE_SHA256[BGE_ONNX.filename]):
        load_embeddings("local:bge-small-en-v1.5").embed_query("anything")
