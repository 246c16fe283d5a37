"""The lexical side: analysis, the BM25 index, and its query."""

from collections import Counter

import pytest

from hyde_lc.errors import InvalidSettingError
from hyde_lc.store.lexical_index import (
    FORMAT,
    IndexState,
    LexicalIndex,
    analyze,
    chunk_digest,
    lexical_query,
    read_state,
)


def test_english_terms_are_stemmed_lowercased_and_stop_words_dropped():
    assert analyze("The Lighthouses of the Coasts") == ["lighthous", "coast"]


def test_single_letters_and_punctuation_are_not_terms():
    assert analyze("a b, c! -- 42 x9") == ["42", "x9"]


def test_cjk_runs_become_characters_and_pairs_and_mix_with_english():
    terms = analyze("Fresnel透镜灯塔")
    assert terms[0] == "fresnel"
    assert set(terms[1:]) == {"透", "镜", "灯", "塔", "透镜", "镜灯", "灯塔"}


def test_japanese_kana_and_korean_are_cjk_too():
    assert "すい" in analyze("すいか") and "등대" in analyze("등대")


def test_query_terms_outweigh_each_hypothesis_only_when_there_are_hypotheses():
    assert lexical_query("lens focus") == Counter({"len": 1, "focus": 1})
    weights = lexical_query("lens", ["A lens and a prism."], query_repeats=5)
    assert weights == Counter({"len": 6, "prism": 1})


def test_index_ranks_by_bm25_and_weights_count_like_repeats():
    index = LexicalIndex.in_memory()
    index.add(
        [
            ("lamp", "Keepers trimmed the lamp wicks every evening."),
            ("lens", "A Fresnel lens bends light with concentric prisms."),
            ("both", "The lamp sat inside the lens."),
        ]
    )
    assert index.search(Counter({"prism": 1}), k=1)[0][0] == "lens"
    # "lamp" weighted up wins over "len": the chunk with both terms first, then the lamp one.
    ranked = [chunk for chunk, _ in index.search(Counter({"lamp": 5, "len": 1}), k=3)]
    assert ranked[:2] == ["both", "lamp"]


def test_adding_an_id_again_replaces_it_and_delete_removes_it():
    index = LexicalIndex.in_memory()
    index.add([("a", "fog horn"), ("b", "tide table")])
    index.add([("a", "granite tower")])
    assert len(index) == 2
    assert index.search(lexical_query("fog"), k=5) == []
    index.delete(["a", "unknown"])
    assert len(index) == 1 and index.search(lexical_query("granite"), k=5) == []


def test_empty_query_or_k_below_one_finds_nothing():
    index = LexicalIndex.in_memory()
    index.add([("a", "fog horn")])
    assert index.search(Counter(), k=3) == [] and index.search(lexical_query("fog"), k=0) == []


def test_an_index_on_disk_survives_reopening_with_its_cursor(tmp_path):
    folder = tmp_path / "lexical"
    index = LexicalIndex.create(folder)
    assert index.cursor() is None  # built from nothing yet: not current for any collection
    index.add([("a", "fog horn")])
    index.mark(7)
    again = LexicalIndex.open(folder)
    assert [c for c, _ in again.search(lexical_query("horn"), k=1)] == ["a"]
    state = read_state(folder)
    assert state is not None and state.audited_at is not None  # built: nothing to compare yet
    assert state == IndexState(FORMAT, 7, 1, state.audited_at) and again.cursor() == 7
    again.mark_audited(123.0)
    again.mark(8)  # a later write keeps the audit's time
    assert read_state(folder) == IndexState(FORMAT, 8, 1, 123.0)


def test_the_index_lists_what_it_holds_by_fingerprint(tmp_path):
    index = LexicalIndex.create(tmp_path / "lexical")
    index.add([("a", "fog horn", {"page": 2}), ("b", "tide table")])
    index.delete(["b"])
    index.add([("c", "lamp oil")])
    assert index.contents() == {
        "a": chunk_digest("fog horn", {"page": 2}),
        "c": chunk_digest("lamp oil"),
    }
    assert LexicalIndex.in_memory().contents() == {}


def test_a_state_of_another_layout_is_not_read(tmp_path):
    folder = tmp_path / "lexical"
    folder.mkdir()
    (folder / LexicalIndex.STATE_FILE).write_text('{"format": 999, "cursor": 3}')
    assert read_state(folder) is None
    (folder / LexicalIndex.STATE_FILE).write_text("not json")
    assert read_state(folder) is None


CHUNKS = [
    ("a", "fog horn at the pier", {"file_name": "a.txt", "page": 1, "kept": True}),
    ("b", "fog bell on the rock", {"file_name": "b.txt", "page": 2, "kept": False}),
    ("c", "fog gun at the fort", {"file_name": "c.txt", "page": 2.0, "kept": True}),
]


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ({"file_name": "b.txt"}, {"b"}),
        ({"file_name": {"$eq": "a.txt"}}, {"a"}),
        ({"page": 2}, {"b", "c"}),  # 2 and 2.0 are one value, as in Chroma
        ({"kept": True}, {"a", "c"}),
        ({"file_name": {"$in": ["a.txt", "c.txt"]}}, {"a", "c"}),
        ({"file_name": {"$ne": "a.txt"}}, {"b", "c"}),
        ({"file_name": {"$nin": ["a.txt", "b.txt"]}}, {"c"}),
        ({"$and": [{"page": 2}, {"kept": True}]}, {"c"}),
        ({"$or": [{"file_name": "a.txt"}, {"kept": False}]}, {"a", "b"}),
        ({"file_name": "none.txt"}, set()),
    ],
)
def test_a_search_filter_narrows_hits_inside_the_index(where, expected):
    index = LexicalIndex.in_memory()
    index.add(CHUNKS)
    unfiltered = dict(index.search(lexical_query("fog"), k=5))
    hits = index.search(lexical_query("fog"), k=5, where=where)
    assert {chunk for chunk, _ in hits} == expected
    assert all(score == unfiltered[chunk] for chunk, score in hits)  # scores unchanged


@pytest.mark.parametrize(
    "where",
    [{"page": {"$gt": 1}}, {"$not": {"page": 1}}, {"page": {"$in": "a"}}, {"page": [1]}],
)
def test_a_filter_the_index_cannot_apply_is_refused_naming_what_is_supported(where):
    index = LexicalIndex.in_memory()
    index.add(CHUNKS)
    with pytest.raises(InvalidSettingError, match=r"supports .*\$in.*lexical='off'"):
        index.search(lexical_query("fog"), k=5, where=where)


@pytest.mark.parametrize("text", ["", "   ", "!!!", "a an the"])
def test_text_without_terms_indexes_and_queries_as_nothing(text):
    index = LexicalIndex.in_memory()
    index.add([("x", text)])
    assert index.search(lexical_query(text), k=3) == []
