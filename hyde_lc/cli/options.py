"""Options shared by several ``hyde-lc`` commands, their parsers, and what they open.

The parsers here refuse a bad value while the command line is read, before any model
loads or any store opens: numbers outside their range (and ``nan``/``inf``), and empty
values that an unset shell variable produces (``--store "$DIR"``).

This module is imported to build the parser, so it stays light: the name tuples the
parser offers as choices are kept here rather than imported from the modules that use
them (those import numpy or LangChain); tests/unit/test_cli_parser.py pins them to the
library's own.

Example:
    >>> parse_k = NUMBERS["k"]
    >>> parse_k("4")
    4
    >>> parse_k("0")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be at least 1, got 0

"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hyde_lc.errors import HydeLcError

MAX_K = 10_000
"""The most chunks one question retrieves (``--k``). More could not reach an answer
model's window anyway; a ``--k`` above the collection's size already returns every chunk
there is."""
MAX_HYPOTHESES = 64
"""The most hypothetical passages per question (``--n-hypotheses``): each one is an LLM
call for every question (`hyde_lc.retrievers.hyde.MAX_HYPOTHESES`)."""
MAX_TIMEOUT_S = 86_400.0
"""The longest ``--timeout``: one day (the thread join behind it refuses far larger
numbers with an OverflowError)."""

FUSION_MODES = ("mean", "concat", "rrf")
"""`hyde_lc.core.fusion.FUSION_MODES`: how query and hypotheses make the dense search."""
LEXICAL_CHOICES = ("on", "off")
"""``--lexical``: BM25 next to the vectors (``on``, the retriever's ``lexical="auto"``)."""


def given(what: str, example: str) -> Callable[[str], str]:
    """An argparse type: text that is not empty, so ``--store ""`` is not taken for "unset".

    An empty value usually comes from an unset shell variable (``--store "$DIR"``); taking
    it for the default would silently read or write somewhere else.
    """

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(
                f"is empty: give {what} (e.g. {example}), or leave the option out for the default"
            )
        return text

    return parse


_SURROGATE = re.compile("[\ud800-\udfff]")


def unicode_problem(text: str) -> str | None:
    """What makes ``text`` unusable as Unicode text (None if nothing).

    Python hands over argument bytes that are not UTF-8 as lone surrogates
    (``\udcff`` for byte 0xff), and a JSON ``\ud800`` escape without its pair decodes
    to one too; no tokenizer or UTF-8 encoder takes them.

    Example:
        >>> unicode_problem("lens \udcff?")
        'byte 0xff at character 6 is not valid UTF-8'
        >>> unicode_problem("lens?") is None
        True

    """
    found = _SURROGATE.search(text)
    if found is None:
        return None
    code = ord(found.group())
    where = f"at character {found.start() + 1}"
    if 0xDC80 <= code <= 0xDCFF:  # how Python escapes a byte that is not UTF-8
        return f"byte 0x{code - 0xDC00:02x} {where} is not valid UTF-8"
    return f"a lone surrogate (U+{code:04X}) {where} is not valid Unicode"


def question_text(text: str) -> str:
    """An argparse type: a question that is valid Unicode text (`unicode_problem`)."""
    problem = unicode_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(
            f"{problem}; give the question as UTF-8 text (check the terminal's encoding, "
            "or convert it: iconv -t UTF-8)"
        )
    return text


def number(
    kind: type,
    minimum: float,
    strict: bool,
    rule: str,
    maximum: float | None = None,
    why: str = "",
) -> Callable[[str], Any]:
    """An argparse type: a finite number of ``kind`` at least (or above) ``minimum``.

    ``nan`` and ``inf`` are refused (``float()`` accepts them, and every comparison with
    nan is false, so a nan would pass any range check); so is anything above ``maximum``
    (``why`` says why there is one).
    """
    most = "" if maximum is None else f"at most {maximum:g}"
    tail = f" ({why})" if why else ""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            if kind is int and text.strip().lstrip("+").isdigit():  # beyond int()'s digit limit
                raise argparse.ArgumentTypeError(
                    f"must be {most or 'smaller'}{tail}, got a {len(text.strip())}-digit number"
                ) from None
            expected = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(
                f"expected a finite number{f', {most}' if most else ''}, got {text.strip()!r}"
            )
        if value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be {most}{tail}, got {value}")
        return value

    return parse


positive_int = number(int, 1, strict=False, rule="at least 1")
positive_float = number(float, 0, strict=True, rule="positive")
non_negative_int = number(int, 0, strict=False, rule="0 or more")
k_count = number(
    int,
    1,
    strict=False,
    rule="at least 1",
    maximum=MAX_K,
    why="a k above the collection's size already returns every chunk there is",
)
hypothesis_count = number(
    int,
    1,
    strict=False,
    rule="at least 1",
    maximum=MAX_HYPOTHESES,
    why="each hypothesis is one LLM call per question",
)
timeout_seconds = number(
    float, 0, strict=True, rule="positive", maximum=MAX_TIMEOUT_S, why="one day"
)


def unit_interval(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1."""
    value = positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be below 1, got {value}")
    return float(value)


NUMBERS: dict[str, Callable[[str], Any]] = {
    "positive_int": positive_int,
    "positive_float": positive_float,
    "non_negative_int": non_negative_int,
    "unit_interval": unit_interval,
    "k": k_count,
    "n_hypotheses": hypothesis_count,
    "timeout": timeout_seconds,
}
"""The number parsers by name (for code that picks one by the option it reads)."""

given_path = given("a path", "--out results.jsonl")
model_spec = given("a model spec", "--answer-llm local:smollm2-135m")


# -- option groups -------------------------------------------------------------------------


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """``--store``, ``--chroma-url``, ``--collection``, ``--embeddings``: where to read/write."""
    group = parser.add_argument_group("store")
    group.add_argument(
        "--store",
        type=given("a folder", "--store ./.hyde_lc"),
        help="Chroma folder (default: $HYDE_LC_STORE or ./.hyde_lc)",
    )
    group.add_argument(
        "--chroma-url",
        type=given("a server URL", "--chroma-url http://127.0.0.1:8000"),
        help="Chroma server URL instead of a folder ($HYDE_LC_CHROMA_URL)",
    )
    group.add_argument(
        "--collection",
        type=given("a collection name", "--collection hyde_lc"),
        help="collection name (default: $HYDE_LC_COLLECTION or hyde_lc)",
    )
    group.add_argument(
        "--embeddings",
        type=given("a model spec", "--embeddings local:minilm"),
        help="embedding model spec (default: the model an existing collection records, else "
        "$HYDE_LC_EMBEDDINGS or local:minilm-dq)",
    )


MODE_HELP = (
    "hyde: search with hypothetical passages as well as the question; standard: the "
    "question only (dense and BM25 fused unless --lexical off: the best measured "
    "configuration). Default: hyde when a hypothesis model is configured (--hypothesis-llm, "
    "$HYDE_LC_HYPOTHESIS_LLM) or --n-hypotheses is given, else standard"
)
"""``--mode`` help for ``ask`` and ``evaluate``: the rule `resolve_mode` applies."""


def resolve_mode(args: Any) -> None:
    """Settle ``args.mode`` (None: the default rule) and ``args.n_hypotheses`` (None: 1).

    The rule is `hyde_lc.evaluation.records.default_mode`: a hypothesis model configured,
    or hypotheses asked for (``--n-hypotheses``, ``--hypotheses-only``), means HyDE.
    """
    from hyde_lc.evaluation.records import default_mode

    if args.mode is None:
        asked = args.n_hypotheses is not None or args.hypotheses_only
        args.mode = default_mode(args.hypothesis_llm, hypotheses_asked=asked)
    if args.n_hypotheses is None:
        args.n_hypotheses = 1


def add_hypothesis_options(group: Any, prompts: list[str], default_prompt: str) -> None:
    """The HyDE settings ``ask``, ``evaluate`` and ``compare`` share."""
    group.add_argument(
        "--n-hypotheses",
        type=hypothesis_count,
        default=None,
        help=f"hypothetical passages per question, 1 to {MAX_HYPOTHESES} (default 1; "
        "implies --mode hyde)",
    )
    group.add_argument(
        "--fusion",
        choices=FUSION_MODES,
        default="mean",
        help="how the question and the hypotheses search: mean (one vector, their mean, as "
        "in the HyDE paper; default), concat (one text, embedded once), rrf (one search per "
        "vector, ranks fused)",
    )
    group.add_argument(
        "--prompt",
        choices=prompts,
        default=default_prompt,
        metavar="PROMPT",
        help=f"which prompt writes the hypotheses (default {default_prompt}): "
        + ", ".join(prompts),
    )
    group.add_argument(
        "--hypotheses-only", action="store_true", help="leave the question out of the fusion"
    )
    group.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=120.0,
        help="seconds to wait for hypotheses, loading the writer included, before using the "
        f"plain question (default 120, at most {MAX_TIMEOUT_S:.0f})",
    )
    group.add_argument(
        "--hypothesis-cache",
        type=given("a file", "--hypothesis-cache hypotheses.sqlite"),
        metavar="FILE",
        help="SQLite file caching hypotheses (a rerun costs no LLM call)",
    )
    group.add_argument(
        "--hypothesis-llm",
        type=model_spec,
        help="model spec ($HYDE_LC_HYPOTHESIS_LLM; default local:qwen2.5-coder-0.5b)",
    )
    group.add_argument("--answer-llm", type=model_spec, help="model spec ($HYDE_LC_ANSWER_LLM)")


def add_k_option(group: Any) -> None:
    """``--k``: chunks (or windows) per question."""
    group.add_argument(
        "--k",
        type=k_count,
        default=4,
        help=f"chunks to retrieve, 1 to {MAX_K} (above the collection's size: all of them)",
    )


# -- what the options open -----------------------------------------------------------------


def open_collection(args: argparse.Namespace, must_exist: bool) -> Any:
    """The collection the store options name, with the embeddings they name.

    With ``must_exist``, a missing or empty collection is refused with what to run first,
    and nothing is created.
    """
    from hyde_lc.models.loading import load_embeddings
    from hyde_lc.store.location import StoreLocation
    from hyde_lc.store.vectorstore import collection_exists, open_store, visible_count

    location = StoreLocation.resolve(args.store, args.chroma_url, args.collection)
    if must_exist and not collection_exists(location):
        raise HydeLcError(
            f"no collection {location.collection!r} at "
            f"{location.url or location.path}: run `hyde-lc ingest PATH...` first (or "
            "`hyde-lc ingest --sample`), or point --store / --collection at it"
        )
    store = open_store(
        location.path,
        url=location.url,
        collection=location.collection,
        # none named: the model the collection records (open_store), else the default
        embeddings=load_embeddings(args.embeddings) if args.embeddings else None,
    )
    if must_exist and visible_count(store) == 0:
        raise HydeLcError(f"{location.describe()} is empty: run `hyde-lc ingest PATH...` first")
    return store


def open_hypothesis_cache(path: str | None) -> Any:
    """`hyde_lc.hyde.hypothesis_cache.HypothesisCache` for ``--hypothesis-cache`` (None: no cache).

    Its folder is created if missing; a file that cannot be a cache is refused.
    """
    if not path:
        return None
    from hyde_lc.hyde.hypothesis_cache import HypothesisCache

    file = Path(path).expanduser()
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HydeLcError(
            f"cannot use {file} as the hypothesis cache: {exc}. Give a file in a folder you "
            "can write"
        ) from exc
    return HypothesisCache(file)
