"""How often local models call a retriever tool in LangGraph's agent, and answer from it.

Every question goes through ``langgraph.prebuilt.create_react_agent`` over one tool,
``search_lighthouses`` (LangChain's ``create_retriever_tool`` over a `HyDERetriever` on
the bundled sample, hybrid, no hypotheses, k=2), with the model answering greedily.

Modes:
- ``auto``: the plain agent, ``create_react_agent(llm, [tool])``: the model decides.
- ``search-first``: the first turn must call the tool (``tool_choice`` forced), the
  next answers without tools: the README's recipe.

Per question it records:
- called: the agent called the tool at least once;
- valid: no reply held a call whose JSON did not parse (``invalid_tool_calls``);
- sensible query: every call's query shares a search term (BM25's analysis) with the question;
- found: the tool's results held every keyword of the reference answer;
- answered: the last message is the model's text, not a call, within 6 graph steps;
- grounded: the answer holds every keyword (found in the tool's results, so not guessed).

    python -m benchmarks.agent_tool_calls --models local:qwen2.5-coder-0.5b --limit 20
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
import warnings
from datetime import date
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, create_retriever_tool

from benchmarks.provenance import head_commit
from benchmarks.sample_qa import QUESTIONS, answered
from hyde_lc import HyDERetriever, ingest_paths, load_llm, open_store
from hyde_lc.cli import sample_files
from hyde_lc.evaluation.question_checks import word_overlap

with warnings.catch_warnings():  # moved to langchain.agents.create_agent; still shipped
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

RESULTS = Path(__file__).parent / "results" / "agent_tool_calls"
PROMPT = (
    "You answer questions about a guide to lighthouses. Search the guide with the "
    "search_lighthouses tool, then answer in one sentence from what it returns."
)
STEPS = 6  # model, tool, model, tool, model: a second search is allowed, a loop is not
OUT_OF_STEPS = "Sorry, need more steps to process this request."
"""The reply LangGraph's prebuilt agent ends with when the step limit cuts a tool call (it
does not raise GraphRecursionError): the agent looped."""
MORE_QUESTIONS = [  # answerable from the sample too (hyde_lc/sample/lighthouses.md)
    ("Who designed the first Eddystone lighthouse?", ["Winstanley"]),
    ("In what year was Smeaton's Eddystone tower first lit?", ["1759"]),
    ("Who built the granite tower of Skerryvore?", ["Alan"]),
    ("What kind of wick did Aime Argand's oil lamp have?", ["wick"]),
    ("When was the Cordouan lighthouse completed?", ["1611"]),
    ("Who designed the Eddystone tower completed in 1882?", ["Douglass"]),
    ("In what year was the Tower of Hercules added to the UNESCO World Heritage List?", ["2009"]),
    ("On what liquid were large lighthouse lenses floated to turn smoothly?", ["mercury"]),
    ("Which sultan built a fortress on the site of the Pharos of Alexandria?", ["Qaitbay"]),
    ("In which year did the Great Storm sweep away the first Eddystone lighthouse?", ["1703"]),
]


def questions() -> list[tuple[str, list[str]]]:
    """The sample's answerable questions, then `MORE_QUESTIONS`."""
    rows = [json.loads(line) for line in QUESTIONS.read_text().splitlines()]
    return [(r["question"], r["keywords"]) for r in rows if r["keywords"]] + MORE_QUESTIONS


def search_first(llm: BaseChatModel, tool: BaseTool) -> Any:
    """The agent's model: forced to search on its first turn, free of tools after it."""
    searching = llm.bind_tools([tool], tool_choice=tool.name)

    def model(state: dict[str, Any], runtime: Any) -> Any:
        searched = any(isinstance(m, ToolMessage) for m in state["messages"])
        return llm if searched else searching

    return model


def score(question: str, keywords: list[str], messages: list[BaseMessage]) -> dict[str, Any]:
    calls = [c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    invalid = [c for m in messages if isinstance(m, AIMessage) for c in m.invalid_tool_calls]
    results = " ".join(m.text for m in messages if isinstance(m, ToolMessage))
    last = messages[-1]
    answer = last.text if isinstance(last, AIMessage) and not last.tool_calls else ""
    queries = [str(c["args"].get("query", "")) for c in calls]
    found = bool(calls) and answered(results, keywords)
    return {
        "called": any(c["name"] == "search_lighthouses" for c in calls),
        "valid": not invalid,
        "sensible_query": bool(queries) and all(word_overlap(q, question) > 0 for q in queries),
        "found": found,
        "answered": bool(answer.strip()),
        "grounded": found and answered(answer, keywords),
        "calls": [{"name": c["name"], "args": c["args"]} for c in calls],
        "invalid_calls": [{"name": c["name"], "args": c["args"]} for c in invalid],
        "answer": answer,
    }


def run_one(agent: Any, question: str, keywords: list[str]) -> dict[str, Any]:
    start = time.perf_counter()
    result = agent.invoke({"messages": [("user", question)]}, {"recursion_limit": STEPS})
    messages: list[BaseMessage] = result["messages"]
    last = messages[-1]
    looped = isinstance(last, AIMessage) and last.text == OUT_OF_STEPS
    row = {"question": question, "keywords": keywords, "looped": looped}
    row.update(score(question, keywords, messages))
    if looped:
        row["answered"] = row["grounded"] = False
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


SUMMED = ("called", "valid", "sensible_query", "found", "answered", "grounded", "looped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["local:qwen2.5-coder-0.5b"])
    parser.add_argument("--modes", nargs="+", default=["auto", "search-first"])
    parser.add_argument("--limit", type=int, default=20, help="questions per model and mode")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--tag", default="", help="suffix of the result file's name")
    args = parser.parse_args()
    args.commit = head_commit()  # the code that runs, even if the checkout moves meanwhile

    store = open_store(tempfile.mkdtemp(prefix="hyde-agent-"))
    ingest_paths(sample_files(), store, progress=False)
    retriever = HyDERetriever(vectorstore=store, n_hypotheses=0, k=2)
    tool = create_retriever_tool(
        retriever,
        "search_lighthouses",
        "Search the guide to lighthouses for passages about a question.",
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    for spec in args.models:
        llm = load_llm(spec, max_tokens=args.max_tokens)
        for mode in args.modes:
            model = search_first(llm, tool) if mode == "search-first" else llm
            agent = create_react_agent(model, [tool], prompt=PROMPT)
            rows = []
            for question, keywords in questions()[: args.limit]:
                rows.append(run_one(agent, question, keywords))
                print(json.dumps({k: rows[-1][k] for k in (*SUMMED, "calls", "seconds")}))
                summary = write(rows, spec, mode, args)  # each time: a cut run keeps its rows
            print(spec, mode, summary, f"of {len(rows)}")


def write(rows: list[dict[str, Any]], spec: str, mode: str, args: argparse.Namespace) -> dict:
    """Write the record of ``rows`` (so far) and return its summary."""
    summary = {key: sum(bool(r[key]) for r in rows) for key in SUMMED}
    record = {
        "model": spec,
        "mode": mode,
        "questions": len(rows),
        "summary": summary,
        "median_seconds": sorted(r["seconds"] for r in rows)[len(rows) // 2],
        "max_tokens": args.max_tokens,
        "k": 2,
        "date": date.today().isoformat(),
        "commit": args.commit,
        "machine": platform.machine(),
        "command": "python -m benchmarks.agent_tool_calls "
        f"--models {spec} --modes {mode} --limit {args.limit} --max-tokens {args.max_tokens}",
        "rows": rows,
    }
    name = f"{spec.split(':')[-1]}-{mode}{args.tag}.json"
    (RESULTS / name).write_text(json.dumps(record, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
