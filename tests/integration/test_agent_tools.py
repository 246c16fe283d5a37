"""The README's offline agent: LangGraph's prebuilt agent, a real local model, a real
retriever tool.

The README block runs as written, in a fresh folder whose ``./.hyde_lc`` collection holds
a few notes, with the test model (SmolLM2-135M) standing in for the answer model. The
recipe forces the first turn to search (``tool_choice``), so even this model calls the
tool; how often the larger local models call it unforced is measured in
benchmarks/agent_tool_calls.py.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from hyde_lc import open_store
from hyde_lc.models import loading
from tests.readme import own_block

pytestmark = pytest.mark.integration

NOTES = [
    "The audit found that the Fresnel lens of the Cordouan lighthouse dates from 1823.",
    "Grace Darling rowed out from the Longstone lighthouse in 1838.",
    "The Cape Hatteras Lighthouse was moved about 2,900 feet inland in 1999.",
]


@pytest.fixture
def recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    """The recipe's namespace after it ran over a collection of `NOTES`, and what it printed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HYDE_LC_ANSWER_LLM", "local:smollm2-135m")
    # a forced call is whole JSON unless cut at the token cap: room for the call
    monkeypatch.setitem(loading.ROLE_MAX_TOKENS, "answer", 48)
    open_store().add_texts(NOTES)
    namespace: dict[str, Any] = {"__name__": "readme"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent moved to langchain.agents
        exec(compile(own_block(__file__), "README.md (agent)", "exec"), namespace)
    namespace["printed"] = capsys.readouterr().out
    return namespace


def test_the_readme_agent_searches_then_answers_from_the_results(recipe):
    _, asked, found, answer = recipe["result"]["messages"]
    [call] = asked.tool_calls
    assert call["name"] == "search_reports" and isinstance(call["args"]["query"], str)
    assert asked.invalid_tool_calls == []
    assert isinstance(found, ToolMessage) and found.tool_call_id == call["id"]
    assert any(note in found.content for note in NOTES)  # the real retriever's hits
    assert isinstance(answer, AIMessage) and answer.text.strip() and not answer.tool_calls
    assert answer.text.strip() in recipe["printed"]

    # streamed, the forced call comes as tool_call_chunks that add up to the same call
    whole = None
    for chunk in recipe["searching"].stream("What did the audit find?"):
        whole = chunk if whole is None else whole + chunk
    assert whole is not None and whole.invalid_tool_calls == []
    assert [c["name"] for c in whole.tool_calls] == ["search_reports"]
    assert set(whole.tool_calls[0]["args"]) == {"query"}
