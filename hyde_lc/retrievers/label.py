"""The one name of a retriever's configuration: ``standard``, ``hybrid``, ``hyde(...)``.

Used by the CLI, evaluation records and benchmarks to say which configuration produced
what: the kind (dense or hybrid, with or without HyDE), then every setting that differs
from its default, in parentheses.

Example:
    >>> from langchain_core.vectorstores import InMemoryVectorStore
    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> from hyde_lc.retrievers.hyde import HyDERetriever
    >>> store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    >>> configuration_label(HyDERetriever(vectorstore=store, n_hypotheses=0))
    'standard'

"""

from __future__ import annotations

from typing import Any

from hyde_lc.hyde.prompts import get_prompt

_LABEL_FIELDS: tuple[tuple[str, str], ...] = (
    ("fusion", "fusion"),
    ("query_weight", "w"),
    ("n_hypotheses", "n"),
    ("prompt", "prompt"),
    ("include_query", "hypotheses-only"),
    ("min_hypothesis_similarity", "gate"),
    ("search_type", "search"),
    ("dense_weight", "dense"),
    ("hybrid_fusion", "hybrid-fusion"),
    ("lexical_query_repeats", "repeats"),
    ("feedback", "feedback"),
    ("feedback_docs", "fb-docs"),
    ("feedback_vector_weight", "fb-beta"),
    ("feedback_terms", "fb-terms"),
    ("feedback_term_weight", "fb-term-weight"),
)
_DENSE_FEEDBACK = ("feedback_vector_weight",)
_LEXICAL_FEEDBACK = ("feedback_terms", "feedback_term_weight")


def configuration_label(retriever: Any) -> str:
    """The one name of a `hyde_lc.HyDERetriever`'s configuration (its ``label``)."""
    hyde = retriever.n_hypotheses > 0
    hybrid = (  # MMR searches dense only
        retriever.search_type == "similarity"
        and retriever.lexical != "off"
        and retriever.lexical_search is not None
    )
    base = {(False, False): "standard", (False, True): "hybrid", (True, False): "hyde"}.get(
        (hyde, hybrid), "hybrid-hyde"
    )
    defaults = type(retriever).model_fields
    parts = []
    for name, short in _LABEL_FIELDS:
        value = getattr(retriever, name)
        if value == defaults[name].default:
            continue
        if not hyde and name in (
            "fusion",
            "query_weight",
            "prompt",
            "include_query",
            "n_hypotheses",
            "min_hypothesis_similarity",
        ):
            continue
        if not hybrid and name in ("dense_weight", "hybrid_fusion", "lexical_query_repeats"):
            continue
        if name.startswith("feedback_") and (
            retriever.feedback == "off"
            or (name in _DENSE_FEEDBACK and retriever.feedback == "lexical")
            or (name in _LEXICAL_FEEDBACK and retriever.feedback == "dense")
        ):
            continue
        if name == "query_weight":
            if value is None and (retriever.fusion == "concat" or not retriever.include_query):
                continue
            parts.append(f"w={'paper' if value is None else f'{value:g}'}")
        elif name == "include_query":
            parts.append(short)
        elif name == "prompt":  # canonical names (an alias is its prompt), templates "custom"
            items = value if isinstance(value, list) else [value]
            parts.append("prompt=" + "+".join(get_prompt(item).name for item in items))
        else:
            parts.append(f"{short}={value:g}" if isinstance(value, float) else f"{short}={value}")
    return base + (f"({','.join(parts)})" if parts else "")
