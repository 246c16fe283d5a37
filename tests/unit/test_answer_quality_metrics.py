"""The answer-quality benchmark's repetition measures flag loops and only loops."""

from __future__ import annotations

from benchmarks.answer_quality import repeated_ngram, repeated_sentence

LOOP = (
    "The Fresnel lens was made in standard sizes called orders [2]. It bends light into "
    "a beam [1]. The Fresnel lens was made in standard sizes called orders [3]."
)
PLAIN = "The Fresnel lens was made in standard sizes called orders [2]. It bends light [1]."


def test_a_sentence_said_twice_is_a_repeat_whatever_its_citation():
    assert repeated_sentence(LOOP) and repeated_ngram(LOOP)
    assert not repeated_sentence(PLAIN) and not repeated_ngram(PLAIN)


def test_chinese_repeats_are_counted_in_characters():
    once = "六胜塔由商人凌恢甫出资重建。"
    assert repeated_ngram(once * 2) and repeated_sentence(once * 2)
    assert not repeated_ngram(once + "姑嫂塔又名关锁塔。")
