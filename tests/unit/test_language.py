import doctest

import pytest

from hyde_lc.core import language as language
from hyde_lc.core.language import (
    SAME_LANGUAGE,
    SAMPLE_CHARS,
    dominant_script,
    english_only_warning,
    is_english_only_model,
    language_code,
    model_languages,
    not_enough_information,
    question_language,
    says_not_enough_information,
    script_shares,
)
from hyde_lc.ingest.files import load_document
from tests.conftest import ROOT, SAMPLE_PDF

SAMPLE_ZH_PDF = ROOT / "hyde_lc" / "sample" / "lighthouses_zh.pdf"


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("How were lighthouse lamps fuelled?", "latin"),
        ("Où se trouve le phare de Cordouan ?", "latin"),
        ("灯塔是一种为船只指引方向的建筑。", "cjk"),
        ("灯台は船に方向を知らせる建物です。", "cjk"),
        ("등대는 배에게 길을 알려 주는 건물입니다.", "cjk"),
        ("Маяк указывает судам путь.", "cyrillic"),
        ("المنارة تهدي السفن في الليل.", "arabic"),
        ("Ο φάρος καθοδηγεί τα πλοία.", "greek"),
        ("", "unknown"),
        ("12345 — !!! 。，", "unknown"),
    ],
)
def test_dominant_script(text, script):
    assert dominant_script(text) == script


def test_chinese_quoting_english_terms_stays_cjk():
    text = "菲涅耳透镜（Fresnel lens）由许多同心的环形棱镜组成，能把灯光汇聚成一束。"
    shares = script_shares(text)
    assert dominant_script(text) == "cjk"
    assert 0 < shares["latin"] < shares["cjk"]
    assert sum(shares.values()) == pytest.approx(1.0)


def test_shares_of_text_without_letters_are_empty():
    assert script_shares("2026-11-24 12:00 !!") == {}


def test_long_text_is_sampled_across_its_whole_length():
    # English first, Chinese for the larger second part: a sample taken from the head
    # only would call it Latin.
    text = "lighthouse keeper " * (SAMPLE_CHARS // 18) + "灯塔与航海。" * (SAMPLE_CHARS // 3)
    assert len(text) > 2 * SAMPLE_CHARS
    assert dominant_script(text) == "cjk"
    assert 0.5 < script_shares(text)["cjk"] < 1


@pytest.mark.parametrize(
    ("question", "language"),
    [
        ("灯塔的透镜是谁发明的？", "Chinese"),
        ("燈塔的透鏡是誰發明的？", "Chinese"),
        ("灯台のレンズは誰が発明しましたか？", "Japanese"),
        ("등대 렌즈는 누가 발명했나요?", "Korean"),
        ("Who invented the lighthouse lens?", "English"),
        ("What is HyDE?", "English"),
        ("Qui a inventé la lentille de Fresnel ?", SAME_LANGUAGE),
        ("Wer hat die Fresnel-Linse erfunden?", SAME_LANGUAGE),
        ("Кто изобрёл линзу Френеля?", SAME_LANGUAGE),
        ("Хто винайшов лінзу Френеля?", "Ukrainian"),
        ("من اخترع عدسة فرينل؟", "Arabic"),
        ("چه کسی عدسه فرنل را اختراع کرد؟", "Persian"),
        ("", SAME_LANGUAGE),
    ],
)
def test_question_language(question, language):
    assert question_language(question) == language


@pytest.mark.parametrize(
    ("question", "marker"),
    [
        ("灯塔的透镜是谁发明的？", "没有足够的信息"),
        ("灯台のレンズは誰が発明しましたか？", "十分な情報がありません"),
        ("등대 렌즈는 누가 발명했나요?", "충분한 정보가 없습니다"),
    ],
)
def test_not_enough_information_in_the_question_language(question, marker):
    reply = not_enough_information(question_language(question))
    assert reply is not None
    assert marker in reply
    assert says_not_enough_information(reply)
    assert says_not_enough_information(f"抱歉。{reply}")


def test_not_enough_information_elsewhere():
    assert not_enough_information("English") is None  # hyde_lc.answer has it
    assert not_enough_information(SAME_LANGUAGE) is None
    assert says_not_enough_information("I don't have enough information in the documents.")
    assert not says_not_enough_information("菲涅耳透镜由法国物理学家菲涅耳发明。")
    assert not says_not_enough_information("The Fresnel lens was invented in 1822.")


def test_language_codes_for_collection_names():
    assert language_code("灯塔的历史") == "zh"
    assert language_code("灯台の歴史") == "ja"
    assert language_code("등대의 역사") == "ko"
    assert language_code("История маяков") == "ru"
    assert language_code("The history of lighthouses") is None


@pytest.mark.parametrize(
    ("model_id", "languages"),
    [
        ("local:minilm", "english"),
        ("local:minilm-dq", "english"),
        ("HuggingFaceEmbeddings:sentence-transformers/all-MiniLM-L6-v2", "english"),
        ("HuggingFaceEmbeddings:BAAI/bge-small-en-v1.5", "english"),
        ("local:multilingual-e5-small", "multilingual"),
        (
            "HuggingFaceEmbeddings:sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2",
            "multilingual",
        ),
        ("openai:text-embedding-3-small", "multilingual"),
        ("openai:text-embedding-3-large", "multilingual"),
        ("fake:hash-32", "unknown"),
    ],
)
def test_model_languages(model_id, languages):
    assert model_languages(model_id) == languages
    assert is_english_only_model(model_id) is (languages == "english")


def test_warning_for_chinese_text_in_an_english_only_collection():
    text = "灯塔是航海的重要标志。" * 20
    warning = english_only_warning("local:minilm", text, source="docs/灯塔.pdf", collection="kb")
    assert warning is not None
    assert "docs/灯塔.pdf" in warning
    assert "local:minilm reads English only" in warning
    assert "Chinese, Japanese or Korean" in warning
    assert warning.endswith(
        "hyde-lc ingest docs/灯塔.pdf --collection kb_zh --embeddings local:multilingual-e5-small"
    )


def test_warning_names_placeholders_without_source_or_collection():
    warning = english_only_warning("local:minilm", "Маяк указывает судам путь.")
    assert warning is not None
    assert "Cyrillic-script" in warning
    assert "hyde-lc ingest PATH --collection NAME_ru --embeddings" in warning


@pytest.mark.parametrize(
    ("model_id", "text"),
    [
        ("local:minilm", "Lighthouses guide ships at night."),
        ("local:minilm", "Les phares guident les navires la nuit."),  # same script: not told
        ("local:minilm", "2026 12:00 —"),
        ("local:multilingual-e5-small", "灯塔是航海的重要标志。"),
        ("openai:text-embedding-3-small", "灯塔是航海的重要标志。"),
        ("fake:hash-32", "灯塔是航海的重要标志。"),
    ],
)
def test_no_warning_when_the_model_can_read_the_text_or_is_unknown(model_id, text):
    assert english_only_warning(model_id, text) is None


def test_bundled_samples_are_detected_from_their_pdf_text():
    chinese = load_document(SAMPLE_ZH_PDF).text
    english = load_document(SAMPLE_PDF).text
    assert dominant_script(chinese) == "cjk"
    assert script_shares(chinese)["cjk"] > 0.9
    assert question_language(chinese) == "Chinese"
    assert dominant_script(english) == "latin"
    assert english_only_warning("local:minilm", english) is None
    warning = english_only_warning("local:minilm", chinese, source=str(SAMPLE_ZH_PDF))
    assert warning is not None
    assert "_zh --embeddings local:multilingual-e5-small" in warning


def test_docstring_examples_hold():
    result = doctest.testmod(language, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 8
    assert result.failed == 0
