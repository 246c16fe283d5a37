"""Repetition penalties and the DRY sampler reach llama.cpp only when set, so today's
requests are unchanged."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from pydantic import ValidationError

from hyde_lc.models.local_llm import LocalChatModel


def _request(**fields: float) -> dict:
    llm = LocalChatModel(model_path="stand-in.gguf", **fields)
    return llm._request([HumanMessage("Why do lighthouses flash?")], None)


def test_penalties_are_left_to_the_engine_unless_set():
    request = _request()
    assert "repeat_penalty" not in request
    assert "frequency_penalty" not in request
    assert not {"dry_multiplier", "dry_penalty_last_n"} & set(request)


def test_set_penalties_are_sent_and_a_call_can_override_them():
    llm = LocalChatModel(model_path="stand-in.gguf", repeat_penalty=1.1, frequency_penalty=0.3)
    messages = [HumanMessage("Why do lighthouses flash?")]
    assert llm._request(messages, None)["repeat_penalty"] == 1.1
    assert llm._request(messages, None)["frequency_penalty"] == 0.3
    assert llm._request(messages, None, repeat_penalty=1.0)["repeat_penalty"] == 1.0


def test_the_dry_sampler_is_sent_when_set():
    request = _request(dry_multiplier=0.8, dry_penalty_last_n=256)
    assert request["dry_multiplier"] == 0.8 and request["dry_penalty_last_n"] == 256


def test_a_negative_dry_multiplier_is_refused():
    with pytest.raises(ValidationError, match="dry_multiplier"):
        _request(dry_multiplier=-1.0)
