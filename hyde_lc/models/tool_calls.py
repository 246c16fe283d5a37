"""Tool calling for local chat models: tools and tool turns in, calls parsed out.

The model's own chat template (run by llama.cpp from the GGUF file) renders what this
module hands it in OpenAI's format: the tools (Qwen2.5 lists them in the system turn,
inside ``<tools></tools>``), an assistant turn's calls (``<tool_call>{"name": ...,
"arguments": ...}</tool_call>``) and a tool's result (``<tool_response>`` in a user
turn). llama.cpp also parses calls that a model writes in its template's format; small
models often write them otherwise, and `parse_tool_calls` reads what it left as text:

- ``<tool_call>{...}</tool_call>`` blocks, several of them, with text around them;
- a reply that is only a call: a JSON object naming a bound tool, possibly in a code
  fence, or in doubled braces (``{{"name": ...}}``, a habit of Qwen2.5-Coder, whose
  template shows the call as ``{"name": <function-name>, ...}``);
- a call whose JSON does not parse becomes an invalid tool call (LangChain's
  ``invalid_tool_calls``), which is not run (LangGraph's prebuilt agent stops there).

These forms are read here because llama.cpp's own parser leaves them as text.

A forced ``tool_choice`` (a tool's name, or ``"any"``) is a JSON schema on the reply:
llama.cpp's grammar lets the model write only a call of that tool (or of one of the
tools) whose arguments follow the tool's schema, and a call cut at the token cap is
closed where it was cut (`forced_reply`). This guarantees a call (unless the cap cuts it
before its arguments begin), never that its arguments make sense. ``"auto"`` (or None)
leaves the choice to the model; ``"none"`` sends no tools and reads no calls.

Example:
    >>> reply = parse_tool_calls(
    ...     'Searching. <tool_call>{"name": "search", "arguments": {"query": "lens"}}'
    ...     "</tool_call>",
    ...     {"search"},
    ... )
    >>> reply.content, reply.tool_calls[0]["args"]
    ('Searching.', {'query': 'lens'})

"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    InvalidToolCall,
    ToolMessage,
)
from langchain_core.messages.tool import (
    ToolCall,
    ToolCallChunk,
    invalid_tool_call,
    tool_call,
    tool_call_chunk,
)
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.utils.json import parse_partial_json

from hyde_lc.errors import HydeLcError

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN_TAG) + r"(.*?)(?:" + re.escape(CLOSE_TAG) + r"|\Z)", re.S)
_FENCE = re.compile(r"\A```[a-zA-Z]*\s*(.*?)\s*```\Z", re.S)
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
_ANY = ("any", "required")


@dataclass
class ParsedReply:
    """A reply split into its text and its tool calls.

    Example:
        >>> parse_tool_calls("Fresnel, in 1822.", {"search"}).tool_calls
        []

    """

    content: str
    """The text outside the calls, stripped."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Calls whose JSON parsed, in order, each with a fresh id."""
    invalid_tool_calls: list[InvalidToolCall] = field(default_factory=list)
    """Calls whose JSON did not parse: the raw text as ``args`` and the reason as ``error``."""


def call_id() -> str:
    """A fresh id for a tool call (the engine's ids are not kept across turns)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def tool_name(tool: dict[str, Any]) -> str:
    """The name of a tool in OpenAI's format (``convert_to_openai_tool``'s output)."""
    return str(tool["function"]["name"])


def forced_tool_names(tool_choice: Any, tools: Sequence[dict[str, Any]]) -> list[str] | None:
    """The tools a ``tool_choice`` obliges the model to call, or None if it may answer.

    ``None``, ``"auto"`` and ``"none"`` oblige nothing; ``"any"``, ``"required"`` and
    ``True`` oblige one of ``tools``; a name, ``{"name": ...}`` or OpenAI's
    ``{"type": "function", "function": {"name": ...}}`` obliges that tool. Raises
    `HydeLcError` for a name no tool has, or a choice of another form.
    """
    names = [tool_name(t) for t in tools]
    if tool_choice is None or tool_choice in ("auto", "none") or tool_choice is False:
        return None
    if tool_choice is True or tool_choice in _ANY:
        return names
    name: Any = tool_choice
    if isinstance(tool_choice, dict):
        name = tool_choice.get("function", tool_choice).get("name")
    if not isinstance(name, str):
        raise HydeLcError(
            f"tool_choice {tool_choice!r} is not understood: give None, 'auto', 'none', "
            "'any' or a tool's name"
        )
    if name not in names:
        raise HydeLcError(
            f"tool_choice names {name!r}, which is not among the bound tools "
            f"({', '.join(names) or 'none'}): name one of them"
        )
    return [name]


def forced_call_schema(tools: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """The JSON schema of a reply that is exactly one call of one of ``names``."""
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool_name(tool)},
                "arguments": tool["function"].get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
        }
        for tool in tools
        if tool_name(tool) in names
    ]
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


def request_fields(tools: Sequence[dict[str, Any]] | None, tool_choice: Any) -> dict[str, Any]:
    """What a chat request to llama.cpp carries for these tools and this choice."""
    if not tools or tool_choice == "none":
        return {}
    fields: dict[str, Any] = {"tools": list(tools)}
    forced = forced_tool_names(tool_choice, tools)
    if forced:
        fields["json_schema"] = forced_call_schema(tools, forced)
    return fields


@dataclass(frozen=True)
class CallReading:
    """How a request's reply is read: the tools it may call, and whether it must call one.

    Example:
        >>> calls_read({"messages": []}) is None
        True

    """

    names: frozenset[str]
    """The bound tools' names."""
    forced: bool
    """Whether the reply is one call and nothing else (a forced ``tool_choice``)."""

    def parse(self, text: str) -> ParsedReply:
        """The whole reply ``text``, split."""
        return forced_reply(text) if self.forced else parse_tool_calls(text, self.names)


def calls_read(request: dict[str, Any]) -> CallReading | None:
    """How to read the reply to ``request`` (made with `request_fields`); None: no tools."""
    tools = request.get("tools")
    if not tools:
        return None
    return CallReading(frozenset(tool_name(t) for t in tools), forced="json_schema" in request)


def chat_message(message: BaseMessage, role: str) -> dict[str, Any]:
    """``message`` as an OpenAI chat message, its calls and tool results included.

    ``role`` is the message's role for every message but a `ToolMessage` (whose role is
    ``tool``). The chat template renders the calls and results in the model's format.
    """
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    rendered: dict[str, Any] = {"role": role, "content": message.text}
    if isinstance(message, AIMessage) and message.tool_calls:
        rendered["tool_calls"] = [
            {
                "id": call["id"] or call_id(),
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["args"])},
            }
            for call in message.tool_calls
        ]
    return rendered


def _unwrap(text: str) -> str:
    """A bare call's JSON without a code fence around it."""
    text = text.strip()
    fenced = _FENCE.match(text)
    return fenced.group(1).strip() if fenced else text


def _as_call(value: Any) -> tuple[str, dict[str, Any]] | None:
    """``(name, arguments)`` if ``value`` is a call object, else None."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI's form: the arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return value["name"], arguments


def _json_objects(text: str) -> list[Any] | None:
    """The JSON values ``text`` consists of (one or several in a row), or None."""
    decoder = json.JSONDecoder()
    values, at = [], 0
    while at < len(text):
        try:
            value, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return None
        values.append(value)
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
    return values


def _call_values(body: str) -> tuple[str, list[Any] | None]:
    """The JSON values of a call's ``body``, and the text they were read from.

    ``{{"name": ...}}`` that does not parse as it stands is read without its outer braces:
    the template shows a call in doubled braces, and small models copy them.
    """
    values = _json_objects(body)
    if values is None and body.startswith("{{") and body.endswith("}}"):
        return body[1:-1], _json_objects(body[1:-1])
    return body, values


def _read_call(body: str) -> ToolCall | InvalidToolCall:
    """One call from the JSON between a pair of tags (or a bare reply)."""
    body = _unwrap(body)
    _, values = _call_values(body)
    parsed = _as_call(values[0]) if values and len(values) == 1 else None
    if parsed is None:
        found = _NAME.search(body)
        error = "the call is not valid JSON" if values is None else "the call has no name"
        if values is not None and found:
            error = "the call's arguments are not a JSON object"
        return invalid_tool_call(
            name=found.group(1) if found else None, args=body, id=call_id(), error=error
        )
    return tool_call(name=parsed[0], args=parsed[1], id=call_id())


def _bare_calls(text: str, names: Collection[str]) -> list[ToolCall | InvalidToolCall] | None:
    """The calls a reply without tags consists of, or None if it is not only calls."""
    body = _unwrap(text)
    if not body.startswith("{"):
        return None
    body, values = _call_values(body)
    if values is None:  # broken JSON: a call only if it names a bound tool
        found = _NAME.search(body)
        if found and found.group(1) in names:
            return [_read_call(body)]
        return None
    calls = [_as_call(value) for value in values]
    if not calls or any(call is None or call[0] not in names for call in calls):
        return None  # JSON of some other kind: the answer itself
    return [tool_call(name=c[0], args=c[1], id=call_id()) for c in calls if c is not None]


def parse_tool_calls(text: str, names: Collection[str]) -> ParsedReply:
    """Split a model's reply into text and tool calls of the tools named ``names``.

    Tagged calls are read whatever tool they name (an agent reports an unknown tool to
    the model); a reply without tags is a call only if it is nothing but JSON naming one
    of ``names``, so that an answer in JSON stays an answer. An unclosed last tag (a
    reply cut at its token cap) is read to the end.
    """
    calls: list[ToolCall | InvalidToolCall]
    if OPEN_TAG in text:
        calls = [_read_call(m.group(1)) for m in _BLOCK.finditer(text)]
        content = _BLOCK.sub("", text)
    else:
        calls = _bare_calls(text, names) or []
        content = "" if calls else text
    reply = ParsedReply(content=content.strip())
    for call in calls:
        if call["type"] == "tool_call":
            reply.tool_calls.append(call)
        else:
            reply.invalid_tool_calls.append(call)
    return reply


def forced_reply(text: str) -> ParsedReply:
    """A reply written under a forced ``tool_choice``: all of it is one call.

    The grammar kept every token a valid start of the call, so a call cut at the token
    cap (a string that ran on) is closed where it was cut, by LangChain's lenient
    ``parse_partial_json`` (as a streamed call's arguments are); what cannot be closed
    into a call with a name and arguments is an invalid call.
    """
    call = _read_call(text)
    if call["type"] == "tool_call":
        return ParsedReply(content="", tool_calls=[call])
    try:
        value = parse_partial_json(_unwrap(text))
    except json.JSONDecodeError:
        value = None
    begun = isinstance(value, dict) and ("arguments" in value or "parameters" in value)
    closed = _as_call(value) if begun else None
    if closed is None:
        return ParsedReply(content="", invalid_tool_calls=[call])
    return ParsedReply(
        content="", tool_calls=[tool_call(name=closed[0], args=closed[1], id=call_id())]
    )


def engine_chunks(delta: dict[str, Any]) -> list[ToolCallChunk]:
    """The calls llama.cpp parsed itself, from a streamed ``delta``, as LangChain's chunks."""
    return [
        tool_call_chunk(
            name=(part.get("function") or {}).get("name"),
            args=(part.get("function") or {}).get("arguments"),
            id=part.get("id"),
            index=part.get("index"),
        )
        for part in delta.get("tool_calls") or []
    ]


def reply_message(
    text: str, engine_calls: Sequence[ToolCallChunk], reading: CallReading, **fields: Any
) -> AIMessage:
    """The `AIMessage` of a whole reply: the engine's calls, then those found in ``text``."""
    parsed = reading.parse(text)
    merged = AIMessageChunk(content="", tool_call_chunks=list(engine_calls))
    return AIMessage(
        content=parsed.content,
        tool_calls=[*merged.tool_calls, *parsed.tool_calls],
        invalid_tool_calls=[*merged.invalid_tool_calls, *parsed.invalid_tool_calls],
        **fields,
    )


def _held_from(text: str, start: int) -> int:
    """Where text that may open a call begins in ``text[start:]`` (``len(text)``: nowhere)."""
    tag = text.find(OPEN_TAG, start)
    if tag >= 0:
        return tag
    for at in range(max(start, len(text) - len(OPEN_TAG) + 1), len(text)):
        if OPEN_TAG.startswith(text[at:]):
            return at  # a tag that may be half written
    return len(text)


def stream_tool_calls(
    chunks: Iterable[ChatGenerationChunk], reading: CallReading
) -> Iterator[ChatGenerationChunk]:
    """Stream a reply's text as it comes, and its calls as ``tool_call_chunks`` at its end.

    Text that may be a call is held back until the reply ends (a reply that opens with
    ``{`` or a code fence, text from a ``<tool_call>`` tag on), then parsed like a whole
    reply; text that cannot be a call streams at once. Calls llama.cpp parsed itself pass
    through. When the chunks are added up (as LangChain does), a call's arguments are
    parsed leniently (``parse_partial_json``), as for every streamed chat model.
    """
    text, sent, index = "", 0, 0
    for chunk in chunks:
        message = chunk.message
        assert isinstance(message, AIMessageChunk)
        for call in message.tool_call_chunks:  # calls the engine parsed, as they come
            index = max(index, (call["index"] or 0) + 1)
        text += message.text
        piece = ""
        if not reading.forced and text.strip() and not text.lstrip().startswith(("{", "`")):
            if not sent:  # the reply's leading blank space is not sent
                sent = len(text) - len(text.lstrip())
            until = _held_from(text, sent)
            piece, sent = text[sent:until], max(sent, until)
        if piece or message.tool_call_chunks or message.usage_metadata or message.response_metadata:
            yield ChatGenerationChunk(message=message.model_copy(update={"content": piece}))
    parsed = reading.parse(text)
    if parsed.tool_calls or parsed.invalid_tool_calls:
        rest = _BLOCK.sub("", text)[sent:] if OPEN_TAG in text else ""
    else:
        rest = text[sent:] if sent else text.strip()
    calls = [
        tool_call_chunk(name=c["name"], args=json.dumps(c["args"]), id=c["id"], index=index + i)
        for i, c in enumerate(parsed.tool_calls)
    ]
    calls += [
        tool_call_chunk(name=c["name"], args=c["args"], id=c["id"], index=index + len(calls) + i)
        for i, c in enumerate(parsed.invalid_tool_calls)
    ]
    rest = rest.rstrip() if sent else rest.strip()
    if rest or calls:
        yield ChatGenerationChunk(message=AIMessageChunk(content=rest, tool_call_chunks=calls))
