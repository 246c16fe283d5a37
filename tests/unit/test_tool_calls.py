"""Tool calls of local models: calls read from replies, tools and tool turns sent.

The parsing and rendering are tested alone; `LocalChatModel.bind_tools` runs over a
stand-in llama.cpp server that replies with scripted text (the real engine and a real
agent: tests/integration/test_agent_tools.py).
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from hyde_lc.errors import HydeLcError
from hyde_lc.models import tool_calls
from hyde_lc.models.local_llm import LocalChatModel
from hyde_lc.models.tool_calls import chat_message, parse_tool_calls, request_fields
from tests.fakes import serve_local_models

NAMES = {"search"}


@tool
def search(query: str) -> str:
    """Search the lighthouse guide."""
    return f"The Fresnel lens was first installed at Cordouan in 1823. ({query})"


@tool
def count_pages(chapter: int) -> int:
    """Count a chapter's pages."""
    return 3


# -- parsing -----------------------------------------------------------------------------


def test_a_tagged_call_is_read_and_the_text_around_it_kept():
    reply = parse_tool_calls(
        'Let me look. <tool_call>\n{"name": "search", "arguments": {"query": "Fresnel lens"}}\n'
        "</tool_call> One moment.",
        NAMES,
    )
    assert reply.content == "Let me look.  One moment."
    [call] = reply.tool_calls
    assert (call["name"], call["args"], call["type"]) == (
        "search",
        {"query": "Fresnel lens"},
        "tool_call",
    )
    assert call["id"].startswith("call_")
    assert reply.invalid_tool_calls == []


def test_several_calls_are_read_in_order_with_their_own_ids():
    text = "".join(
        f'<tool_call>{{"name": "search", "arguments": {{"query": "{q}"}}}}</tool_call>\n'
        for q in ("Pharos", "Eddystone", "Bell Rock")
    )
    reply = parse_tool_calls(text, NAMES)
    assert [c["args"]["query"] for c in reply.tool_calls] == ["Pharos", "Eddystone", "Bell Rock"]
    assert len({c["id"] for c in reply.tool_calls}) == 3
    assert reply.content == ""


def test_a_call_with_malformed_json_is_an_invalid_call_beside_the_valid_one():
    reply = parse_tool_calls(
        '<tool_call>{"name": "search", "arguments": {"query": "lens"</tool_call>'
        '<tool_call>{"name": "search", "arguments": {"query": "keepers"}}</tool_call>',
        NAMES,
    )
    [bad] = reply.invalid_tool_calls
    assert bad["name"] == "search"
    assert bad["args"] == '{"name": "search", "arguments": {"query": "lens"'
    assert "not valid JSON" in bad["error"]
    assert [c["args"] for c in reply.tool_calls] == [{"query": "keepers"}]


def test_a_call_cut_at_the_token_cap_is_invalid():
    reply = parse_tool_calls('<tool_call>\n{"name": "search", "arguments": {"que', NAMES)
    assert reply.tool_calls == []
    assert reply.invalid_tool_calls[0]["name"] == "search"


def test_a_reply_without_a_call_is_all_content():
    reply = parse_tool_calls("The first Fresnel lens was lit at Cordouan in 1823.", NAMES)
    assert reply.content == "The first Fresnel lens was lit at Cordouan in 1823."
    assert reply.tool_calls == [] and reply.invalid_tool_calls == []


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "search", "arguments": {"query": "Fresnel"}}',
        '```json\n{"name": "search", "arguments": {"query": "Fresnel"}}\n```',
        '{{"name": "search", "arguments": {"query": "Fresnel"}}}',  # Qwen2.5-Coder's habit
        '{"name": "search", "arguments": "{\\"query\\": \\"Fresnel\\"}"}',  # OpenAI's form
        '{"name": "search", "parameters": {"query": "Fresnel"}}',
    ],
    ids=["bare", "fenced", "doubled-braces", "string-arguments", "parameters"],
)
def test_a_reply_that_is_only_a_call_of_a_bound_tool_is_read(text):
    reply = parse_tool_calls(text, NAMES)
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("search", {"query": "Fresnel"})]
    assert reply.content == ""


@pytest.mark.parametrize(
    "text",
    [
        '{"answer": "Cordouan", "year": 1823}',
        '{"name": "Cordouan", "arguments": {"built": 1611}}',  # names no bound tool
        '{"name": "Cordouan", "built": 1611',  # broken, and names no bound tool
    ],
)
def test_json_that_is_not_a_call_of_a_bound_tool_stays_the_answer(text):
    reply = parse_tool_calls(text, NAMES)
    assert reply.content == text
    assert reply.tool_calls == [] and reply.invalid_tool_calls == []


def test_broken_json_naming_a_bound_tool_is_an_invalid_call():
    reply = parse_tool_calls('{"name": "search", "arguments": {"query": "lens"}', NAMES)
    assert reply.tool_calls == []
    assert reply.invalid_tool_calls[0]["name"] == "search"


def test_a_forced_reply_is_one_call():
    [call] = tool_calls.forced_reply('{"name": "search", "arguments": {"query": "x"}}').tool_calls
    assert (call["name"], call["args"]) == ("search", {"query": "x"})


def test_a_forced_call_cut_at_the_token_cap_is_closed_where_it_was_cut():
    # the grammar kept each token a valid start of the call: the running string is cut
    cut = '{\n  "name": "search",\n  "arguments": {\n    "query": "audit_audit_aud'
    [call] = tool_calls.forced_reply(cut).tool_calls
    assert (call["name"], call["args"]) == ("search", {"query": "audit_audit_aud"})


def test_a_forced_reply_cut_before_its_arguments_is_invalid():
    assert tool_calls.forced_reply('{"name": "search", "argu').invalid_tool_calls
    assert tool_calls.forced_reply("").invalid_tool_calls


# -- what is sent ------------------------------------------------------------------------


def test_calls_and_tool_results_are_sent_as_the_chat_template_expects():
    call = {"name": "search", "args": {"query": "lens"}, "id": "call_1"}
    asked = chat_message(AIMessage("", tool_calls=[call]), "assistant")
    assert asked["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "search", "arguments": json.dumps({"query": "lens"})},
        }
    ]
    answered = chat_message(ToolMessage("Cordouan, 1823.", tool_call_id="call_1"), "tool")
    assert answered == {"role": "tool", "tool_call_id": "call_1", "content": "Cordouan, 1823."}
    assert chat_message(HumanMessage("Hi"), "user") == {"role": "user", "content": "Hi"}


def _openai(*tools: Any) -> list[dict[str, Any]]:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    return [convert_to_openai_tool(t) for t in tools]


def test_tool_choice_auto_sends_the_tools_and_forces_nothing():
    fields = request_fields(_openai(search), None)
    assert [t["function"]["name"] for t in fields["tools"]] == ["search"]
    assert "json_schema" not in fields
    assert request_fields(_openai(search), "auto") == fields
    assert request_fields(_openai(search), "none") == {}


def test_a_named_tool_choice_is_a_schema_of_that_one_call():
    schema = request_fields(_openai(search, count_pages), "search")["json_schema"]
    assert schema["properties"]["name"] == {"const": "search"}
    assert schema["properties"]["arguments"]["properties"]["query"]["type"] == "string"
    assert schema["required"] == ["name", "arguments"]
    openai_form = {"type": "function", "function": {"name": "search"}}
    assert request_fields(_openai(search, count_pages), openai_form)["json_schema"] == schema


def test_tool_choice_any_is_a_call_of_one_of_the_tools():
    schema = request_fields(_openai(search, count_pages), "any")["json_schema"]
    assert [s["properties"]["name"]["const"] for s in schema["anyOf"]] == ["search", "count_pages"]


# -- LocalChatModel over a stand-in engine ---------------------------------------------------


class ScriptedServer:
    """Replies to each request with the next script: text pieces, or engine-parsed calls."""

    def __init__(self, *scripts: list[Any]) -> None:
        self.scripts = list(scripts)
        self.requests: list[dict[str, Any]] = []

    def handle_chat_completions(self, request: dict[str, Any], on_chunk: Any) -> None:
        self.requests.append(request)
        for piece in self.scripts.pop(0):
            delta = {"content": piece} if isinstance(piece, str) else {"tool_calls": [piece]}
            on_chunk({"choices": [{"delta": delta, "finish_reason": None}]})
        on_chunk({"choices": [{"delta": {}, "finish_reason": "stop"}]})
        usage = {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}
        on_chunk({"choices": [], "usage": usage})


def _model(monkeypatch: pytest.MonkeyPatch, *scripts: list[Any]) -> tuple[Any, ScriptedServer]:
    server = ScriptedServer(*scripts)
    serve_local_models(monkeypatch, server)
    return LocalChatModel(model_path="stand-in.gguf", temperature=0.0), server


CALL_PIECES = [
    "<tool",
    '_call>\n{"name": "search", ',
    '"arguments": {"query": "lens"}}\n</tool_call>',
]


def test_bind_tools_sends_the_tools_and_reads_the_call(monkeypatch):
    llm, server = _model(monkeypatch, CALL_PIECES)
    message = llm.bind_tools([search]).invoke("Where was the first Fresnel lens?")
    assert [(c["name"], c["args"]) for c in message.tool_calls] == [("search", {"query": "lens"})]
    assert message.content == ""
    assert message.usage_metadata["output_tokens"] == 9
    [sent] = server.requests[0]["tools"]
    assert sent["function"]["name"] == "search"
    assert "json_schema" not in server.requests[0]


def test_a_model_without_tools_reads_no_calls(monkeypatch):
    llm, server = _model(monkeypatch, CALL_PIECES)
    message = llm.invoke("Where was the first Fresnel lens?")
    assert message.tool_calls == [] and "<tool_call>" in message.content
    assert "tools" not in server.requests[0]


def test_a_named_tool_choice_reaches_the_engine_as_a_schema(monkeypatch):
    llm, server = _model(monkeypatch, ['{"name": "search", "arguments": {"query": "lens"}}'])
    message = llm.bind_tools([search, count_pages], tool_choice="search").invoke("Fresnel?")
    assert message.tool_calls[0]["args"] == {"query": "lens"}
    assert server.requests[0]["json_schema"]["properties"]["name"] == {"const": "search"}


def test_a_tool_choice_naming_no_bound_tool_is_refused_when_bound():
    llm = LocalChatModel(model_path="stand-in.gguf")
    with pytest.raises(HydeLcError, match="not among the bound tools"):
        llm.bind_tools([search], tool_choice="lookup")


def test_streamed_text_comes_at_once_and_the_call_at_the_end(monkeypatch):
    llm, _ = _model(monkeypatch, ["Let me ", "look. ", *CALL_PIECES])
    chunks = list(llm.bind_tools([search]).stream("Where was the first Fresnel lens?"))
    texts = [c.content for c in chunks if c.content]
    assert texts[:2] == ["Let me ", "look. "]  # not held back: it cannot be a call
    assert not any("tool_call" in t for t in texts)
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    assert [(c["name"], c["args"]) for c in whole.tool_calls] == [("search", {"query": "lens"})]
    assert whole.content.strip() == "Let me look."


def test_a_streamed_answer_without_a_call_is_all_text(monkeypatch):
    llm, _ = _model(monkeypatch, ["Cordouan, ", "in 1823."])
    chunks = list(llm.bind_tools([search]).stream("Where was the first Fresnel lens?"))
    assert "".join(c.content for c in chunks) == "Cordouan, in 1823."
    assert not any(c.tool_call_chunks for c in chunks)


def test_calls_the_engine_parsed_itself_come_through(monkeypatch):
    part = {
        "index": 0,
        "id": "abc",
        "function": {"name": "search", "arguments": '{"query": "lens"}'},
    }
    llm, _ = _model(monkeypatch, [part])
    message = llm.bind_tools([search]).invoke("Fresnel?")
    assert [(c["name"], c["args"], c["id"]) for c in message.tool_calls] == [
        ("search", {"query": "lens"}, "abc")
    ]


def test_langgraphs_agent_calls_the_tool_and_answers_from_its_result(monkeypatch):
    from langgraph.prebuilt import create_react_agent

    llm, server = _model(monkeypatch, CALL_PIECES, ["Cordouan, in 1823."])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # moved to langchain.agents.create_agent, still here
        agent = create_react_agent(llm, [search])
    messages = agent.invoke({"messages": [("user", "Where was the first Fresnel lens?")]})[
        "messages"
    ]
    assert [type(m).__name__ for m in messages] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]
    assert messages[-1].content == "Cordouan, in 1823."
    call_id = messages[1].tool_calls[0]["id"]
    answer_request = server.requests[1]["messages"]
    assert answer_request[1]["tool_calls"][0]["id"] == call_id  # the call, sent back
    assert answer_request[2]["role"] == "tool" and answer_request[2]["tool_call_id"] == call_id
    assert "Cordouan in 1823" in answer_request[2]["content"]
