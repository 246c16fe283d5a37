r"""Is a reference context inside a retrieved chunk? Context precision and recall by containment.

Ragas' offline context metrics (``NonLLMContextPrecisionWithReference``,
``NonLLMContextRecall``) compare a reference context with a retrieved chunk as whole
strings, by a string distance: a one-sentence reference inside a 1,000-character chunk
is 90% "different" and scores as not retrieved. Here a reference counts as found in a
chunk when the chunk holds it, allowing small differences:

- both texts are normalised: Unicode NFKC (full-width letters, digits and punctuation as
  their usual forms), case folded, whitespace and invisible format characters (soft
  hyphens, zero-width spaces) removed, so line breaks inside a chunk (a PDF's, or Chinese
  text broken across lines, which has no spaces to normalise) never hide a sentence;
- the reference is aligned with the stretch of the chunk that matches it best (rapidfuzz's
  ``partial_ratio``), and `found_share` is how much of the reference that stretch holds
  (1.0: all of it, verbatim); it is found at `FOUND_AT` (90%) or more, so a changed word
  or a typo still counts and a sentence cut in half at a chunk's edge does not.

`contained_precision` is rank-aware like Ragas' context precision (the mean, over the
chunks that hold a reference, of the precision at their rank); `contained_recall` is the
share of the reference contexts found in some chunk. A reference longer than every chunk
(a passage split over two chunks) is found in neither: these metrics are for references
shorter than the chunks, which is when `hyde_lc.evaluation.ragas_metrics` picks them.

Example:
    >>> chunk = "Lighthouses guide ships. The first Fresnel lens was lit at\nCordouan in 1823."
    >>> found_share("the first Fresnel lens was lit at Cordouan in 1823", chunk)
    1.0
    >>> contained_recall([chunk, "Keepers lived on the rock."], ["Fresnel lens was lit", "Pharos"])
    0.5
    >>> contained_precision(["Keepers lived on the rock.", chunk], ["Fresnel lens was lit"])
    0.5

"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from rapidfuzz import fuzz

FOUND_AT = 0.9
"""The share of a reference a chunk must hold for the reference to count as found."""

_MISSING = "\uffff"
"""A noncharacter: no normalised text holds it, so it matches nothing."""


def normalized(text: str) -> str:
    r"""``text`` as containment compares it: NFKC, case folded, no whitespace or format marks.

    Example:
        >>> normalized("Ｆｒｅｓｎｅｌ  Lens\u00ad es")
        'fresnellenses'

    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in folded if not c.isspace() and unicodedata.category(c) != "Cf")


def found_share(reference: str, chunk: str) -> float:
    """How much of ``reference`` the best-matching stretch of ``chunk`` holds, 0.0 to 1.0.

    Both are `normalized` first; an empty reference is found nowhere (0.0).
    """
    ref, text = normalized(reference), normalized(chunk)
    if not ref:
        return 0.0
    # rapidfuzz's partial_ratio scores the window of the chunk that best matches the
    # reference; a window at the chunk's edge may be shorter than the reference, and then
    # only the part it holds is compared (a reference half inside the chunk would score
    # high). Padding the chunk with characters that match nothing makes every window as
    # long as the reference, so the part outside the chunk counts as missing. The same
    # holds for a reference longer than the chunk: the score is the share of it the chunk
    # holds. rapidfuzz has no option for this.
    pad = _MISSING * len(ref)
    return float(fuzz.partial_ratio(ref, pad + text + pad)) / 100.0


def contains(chunk: str, reference: str, threshold: float = FOUND_AT) -> bool:
    """Whether ``chunk`` holds ``reference`` (at least ``threshold`` of it, `found_share`)."""
    return found_share(reference, chunk) >= threshold


def contained_precision(
    retrieved: Sequence[str], references: Sequence[str], threshold: float = FOUND_AT
) -> float:
    """Rank-aware share of ``retrieved`` chunks that hold some reference (0.0 to 1.0).

    Average precision as in Ragas' context precision: the mean, over the chunks that hold
    a reference, of the share of relevant chunks up to that chunk's rank; 0.0 when none
    does.
    """
    verdicts = [any(contains(c, r, threshold) for r in references) for c in retrieved]
    hits = 0
    total = 0.0
    for rank, relevant in enumerate(verdicts, start=1):
        if relevant:
            hits += 1
            total += hits / rank
    return total / hits if hits else 0.0


def contained_recall(
    retrieved: Sequence[str], references: Sequence[str], threshold: float = FOUND_AT
) -> float:
    """Share of ``references`` that some ``retrieved`` chunk holds (0.0 to 1.0).

    Raises ValueError without references (there is nothing to recall).
    """
    if not references:
        raise ValueError("contained_recall needs at least one reference context")
    found = [any(contains(c, r, threshold) for c in retrieved) for r in references]
    return sum(found) / len(found)
