"""LangGraph's prebuilt agent over a real local model and a real retriever tool.

The test model (SmolLM2-135M) seldom calls a tool of its own accord, so its first turn
is forced to search (``tool_choice``), as the README's recipe does; how often the
larger local models call the tool unforced is measured in benchmarks/agent_tool_calls.py.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, create_retriever_tool

from hyde_lc import HyDERetriever, load_llm, open_store

pytestmark = pytest.mark.integration

NOTES = [
    "The first Fresnel lens was installed in the Cordouan lighthouse in 1823.",
    "Grace Darling rowed out from the Longstone lighthouse in 1838.",
    "The Cape Hatteras Lighthouse was moved about 2,900 feet inland in 1999.",
]


PROMPT = "You answer questions about lighthouses from notes."


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory) -> BaseTool:
    store = open_store(tmp_path_factory.mktemp("agent-notes"))
    store.add_texts(NOTES)
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=1)
    return create_retriever_tool(retriever, "search_notes", "Search notes about lighthouses.")


@pytest.fixture(scope="module")
def smol() -> Any:
    return load_llm("local:smollm2-135m", max_tokens=24, threads=1)


def test_the_prebuilt_agent_searches_then_answers(smol, search):
    from langgraph.prebuilt import create_react_agent

    # a forced call is whole JSON unless cut at the token cap: room for the call
    searching = smol.bind_tools([search], tool_choice="search_notes", max_tokens=48)

    def model(state: dict[str, Any], runtime: Any) -> Any:
        searched = any(isinstance(m, ToolMessage) for m in state["messages"])
        return smol if searched else searching

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # moved to langchain.agents.create_agent, still here
        agent = create_react_agent(model, [search], prompt=PROMPT)
    question = {"messages": [("user", "Where was the first Fresnel lens installed?")]}
    streamed, messages = [], []
    # "messages" streams the model's tokens (LocalChatModel._stream), "values" the states
    for mode, data in agent.stream(
        question, {"recursion_limit": 6}, stream_mode=["messages", "values"]
    ):
        if mode == "messages":
            streamed.append(data[0])
        else:
            messages = data["messages"]

    _, asked, found, answer = messages
    [call] = asked.tool_calls
    assert call["name"] == "search_notes" and isinstance(call["args"]["query"], str)
    assert asked.invalid_tool_calls == []
    assert [c["name"] for m in streamed for c in getattr(m, "tool_call_chunks", [])] == [
        "search_notes"
    ]
    assert isinstance(found, ToolMessage) and found.tool_call_id == call["id"]
    assert found.content in NOTES  # the real retriever's hit, handed back to the model
    assert isinstance(answer, AIMessage) and answer.text.strip() and not answer.tool_calls
