"""Repetition penalties reach llama.cpp only when set, so today's requests are unchanged."""

from __future__ import annotations

from langchain_core.messages import HumanMessage

from hyde_lc.local_llm import LocalChatModel


def _request(**fields: float) -> dict:
    llm = LocalChatModel(model_path="stand-in.gguf", **fields)
    return llm._request([HumanMessage("Why do lighthouses flash?")], None)


def test_penalties_are_left_to_the_engine_unless_set():
    request = _request()
    assert "repeat_penalty" not in request
    assert "frequency_penalty" not in request


def test_set_penalties_are_sent_and_a_call_can_override_them():
    llm = LocalChatModel(model_path="stand-in.gguf", repeat_penalty=1.1, frequency_penalty=0.3)
    messages = [HumanMessage("Why do lighthouses flash?")]
    assert llm._request(messages, None)["repeat_penalty"] == 1.1
    assert llm._request(messages, None)["frequency_penalty"] == 0.3
    assert llm._request(messages, None, repeat_penalty=1.0)["repeat_penalty"] == 1.0
