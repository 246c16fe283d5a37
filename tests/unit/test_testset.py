"""A test set made from a collection: the question checks, the spread, resuming, a changed
collection, Chinese chunks, and what evaluate and Ragas read."""

from __future__ import annotations

import json

import pytest
from langchain_core.documents import Document
from pydantic import Field

from hyde_lc.errors import HydeLcError
from hyde_lc.evaluation.question_checks import (
    QuestionRules,
    answer_supported,
    judge_draft,
    longest_copy,
    other_answers,
    refers_to_passage,
    word_overlap,
)
from hyde_lc.evaluation.question_writer import parse_draft
from hyde_lc.evaluation.runs import read_questions
from hyde_lc.evaluation.testset import (
    ChunkSource,
    check_references,
    make_testset,
    read_testset,
    rejected_path,
    spread_order,
    to_ragas_dataset,
)
from tests.fakes import PromptLog, ScriptedChat

LIGHTS = {
    "bell": "The Bell Rock lighthouse stands on a reef off Angus. Robert Stevenson completed it "
    "in 1810 after four summers of work; the tower is built of dovetailed granite blocks and "
    "its light was first shown in February 1811 to ships crossing the Firth of Tay.",
    "eddy": "The first Eddystone light was a wooden tower raised by Henry Winstanley in 1698. "
    "A great storm swept it away in 1703 together with its builder, and John Rudyerd put up "
    "a second tower of timber and stone that burned down in 1755 after a fire in the lantern.",
    "pharos": "The Pharos of Alexandria was designed by Sostratus of Cnidus and finished "
    "under Ptolemy II around 280 BC. Its fire was reflected by bronze mirrors, and ancient "
    "writers counted the tower among the wonders of the world until earthquakes ruined it.",
    "fresnel": "Augustin Fresnel presented his stepped lens to the French lighthouse "
    "commission in 1822; the first one was installed at Cordouan in 1823. Concentric prisms "
    "bent the light of one lamp into a beam that sailors saw more than twenty miles away.",
}
GOOD = {
    "bell": "Question: Which engineer finished the reef tower off Angus, and when?\n"
    "Answer: Robert Stevenson, 1810",
    "eddy": "Question: What destroyed Winstanley's wooden tower on the Eddystone rocks?\n"
    "Answer: A great storm in 1703",
    "pharos": "Question: Who is said to have designed the great lighthouse of Egypt?\n"
    "Answer: Sostratus of Cnidus",
    "fresnel": "Question: Where was the first stepped lighthouse lens put into service?\n"
    "Answer: Cordouan, 1823",
}


def source(texts: dict[str, str] = LIGHTS, search=None) -> ChunkSource:
    docs = [
        Document(text, id=key, metadata={"source": f"{key}.pdf", "chunk_index": 0})
        for key, text in texts.items()
    ]
    return ChunkSource("lights", docs, search)


class ByChunk(ScriptedChat):
    """A writer that answers each chunk's prompt with its line of ``GOOD`` (or ``script``)."""

    script: dict = Field(default_factory=dict)

    def _next(self) -> str:  # the prompt is not passed to _next: see _generate
        raise NotImplementedError

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        prompt = messages[-1].content
        self.log.append(prompt)
        for key, reply in {**GOOD, **self.script}.items():
            if LIGHTS.get(key, key)[:40] in prompt:
                if isinstance(reply, list):  # successive replies for one chunk
                    return self._result(reply.pop(0))
                return self._result(reply)
        return self._result("Question: ?\nAnswer: ?")


# -- the checks ---------------------------------------------------------------------------


def test_longest_copy_counts_words_and_chinese_characters():
    chunk = LIGHTS["bell"]
    assert longest_copy("Who completed it in 1810 after four summers of work?", chunk) == 9
    assert longest_copy("Which engineer finished the reef tower off Angus?", chunk) <= 2
    # Chinese: each character is 0.6 of a word, so 10 copied characters are 6 words.
    assert longest_copy(
        "六胜塔由谁重建", "元代至元二年商人凌恢甫出资重建六胜塔。"
    ) == pytest.approx(1.8)
    assert longest_copy(
        "商人凌恢甫出资重建的是哪座塔", "元代商人凌恢甫出资重建六胜塔。"
    ) == pytest.approx(5.4)


def test_answer_support_needs_the_terms_and_every_number():
    chunk = LIGHTS["bell"]
    assert answer_supported("Robert Stevenson, 1810", chunk)
    assert not answer_supported("Robert Stevenson, 1812", chunk)  # a number not in the chunk
    assert not answer_supported("Thomas Telford", chunk)
    assert not answer_supported("Yes.", chunk)  # no term to check: not an answer
    assert answer_supported("凌恢甫", "元代商人凌恢甫出资重建六胜塔。")


def test_questions_that_lean_on_their_passage_are_caught():
    assert refers_to_passage("What did this study measure?")
    assert refers_to_passage("According to the text, who built it?")
    assert refers_to_passage("文中提到的塔是谁建的？")
    assert not refers_to_passage("Which study first measured tidal heights at Brest?")


def test_judge_names_the_first_problem():
    chunk, rules = LIGHTS["bell"], QuestionRules()
    ok = judge_draft("Which engineer finished the reef tower off Angus, and when?",
                     "Robert Stevenson, 1810", chunk, rules)  # fmt: skip
    assert ok.problem is None and 0 < ok.overlap < 1
    copy = judge_draft("Who completed it in 1810 after four summers of work?", "Stevenson",
                       chunk, rules)  # fmt: skip
    assert copy.problem == "copies" and copy.needs_rewrite
    assert judge_draft("What?", "Stevenson", chunk, rules).problem == "too vague"
    wrong = judge_draft("Which engineer finished the reef tower?", "Telford", chunk, rules)
    assert wrong.problem == "unsupported" and not wrong.needs_rewrite


def test_other_chunks_answering_as_well_are_counted_above_the_reference_only():
    same = "Stevenson finished it in 1810."
    ranked = [Document(same, id="x"), Document(same, id="y"), Document("ref", id="r"),
              Document(same, id="z")]  # fmt: skip
    assert other_answers("r", "Stevenson, 1810", ranked) == ["x", "y"]
    assert other_answers("gone", "Stevenson, 1810", ranked) == ["x", "y", "z"]


def test_overlap_is_bm25s_view_of_shared_terms():
    assert word_overlap("bending lights", "A lens bends the light.") == 1.0
    assert word_overlap("granite reef", "A lens bends the light.") == 0.0


def test_parse_draft_reads_english_chinese_and_markdown():
    assert parse_draft("Question: Who?\nAnswer: Him") == ("Who?", "Him")
    assert parse_draft("**Question:** Who built it?\n**Answer:** Sostratus") == (
        "Who built it?",
        "Sostratus",
    )
    assert parse_draft("问题：谁建的？\n答案：凌恢甫") == ("谁建的？", "凌恢甫")
    assert parse_draft("I cannot help with that.") == (None, None)


# -- which chunks -------------------------------------------------------------------------


def test_spread_takes_every_source_before_a_second_chunk_and_spreads_positions():
    docs = [
        Document(f"{s}{i}", id=f"{s}{i}", metadata={"source": s, "chunk_index": i})
        for s, count in (("big", 40), ("mid", 10), ("one", 1))
        for i in range(count)
    ]
    order = spread_order(docs, seed=3)
    assert sorted(d.id for d in order) == sorted(d.id for d in docs)  # each once
    assert {d.metadata["source"] for d in order[:3]} == {"big", "mid", "one"}
    big = [d.metadata["chunk_index"] for d in order if d.metadata["source"] == "big"][:4]
    assert max(big) - min(big) >= 20  # spread over the document, not neighbours
    assert [d.id for d in spread_order(docs, seed=3)] == [d.id for d in order]  # seeded
    assert [d.id for d in spread_order(docs, seed=4)] != [d.id for d in order]


# -- making the set -----------------------------------------------------------------------


def test_a_set_is_what_evaluate_reads_with_the_chunk_as_reference(tmp_path):
    out = tmp_path / "q.jsonl"
    summary = make_testset(source(), out, n=4, writer=ByChunk(), progress=False, rephraser=None)
    assert (summary.kept, summary.rejected) == (4, {})
    questions = read_questions(out)
    assert len(questions) == 4
    for q in questions:
        (chunk_id,) = q.reference_context_ids
        assert q.reference_contexts == [LIGHTS[chunk_id]]
        assert q.extra["source"] == f"{chunk_id}.pdf"
        assert q.extra["testset"]["collection"] == source().fingerprint
    assert {q.reference for q in questions} >= {"Sostratus of Cnidus"}


def test_a_copying_question_is_rewritten_and_a_copying_rewrite_dropped(tmp_path):
    copy = "Question: Who completed it in 1810 after four summers of work?\nAnswer: Stevenson"
    writer = ByChunk(
        script={
            "bell": [copy, "Which engineer finished the reef tower off Angus?"],  # no label
            "eddy": [
                "Question: Who raised the first Eddystone light was a wooden tower?\n"
                "Answer: Henry Winstanley",
                "Question: Who raised the first Eddystone light was a wooden tower?",
            ],
        }
    )
    out = tmp_path / "q.jsonl"
    summary = make_testset(source(), out, n=4, writer=writer, progress=False, rephraser=None)
    assert summary.kept == 3 and summary.rejected == {"copies": 1}
    bell = next(q for q in read_questions(out) if q.reference_context_ids == ["bell"])
    assert bell.question == "Which engineer finished the reef tower off Angus?"
    assert bell.extra["testset"]["first_draft"].startswith("Who completed it in 1810")
    (dropped,) = [json.loads(line) for line in rejected_path(out).read_text().splitlines()]
    assert dropped["chunk_id"] == "eddy" and dropped["reason"] == "copies"


REPHRASED = {
    "Which engineer finished the reef tower off Angus, and when?":
        "Who built the lighthouse on the rocks near Angus, and in what year?",
    "What destroyed Winstanley's wooden tower on the Eddystone rocks?":
        "What wrecked the first Eddystone light?",
    "Who is said to have designed the great lighthouse of Egypt?":
        "Who planned Alexandria's famous ancient light?",
    "Where was the first stepped lighthouse lens put into service?":
        "Which light got the first Fresnel lens?",
}  # fmt: skip


class Rephraser(ScriptedChat):
    """Answers a rephrase prompt with the question's line of ``REPHRASED`` (or ``script``)."""

    script: dict = Field(default_factory=dict)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        prompt = messages[-1].content
        self.log.append(prompt)
        for question, reply in {**REPHRASED, **self.script}.items():
            if question in prompt:
                return self._result(f"Reader's question: {reply}")
        return self._result("")


def test_a_rephraser_puts_every_draft_in_other_words_without_seeing_the_chunk(tmp_path):
    rephraser = Rephraser()
    out = tmp_path / "q.jsonl"
    summary = make_testset(
        source(), out, n=4, writer=ByChunk(), rephraser=rephraser, progress=False
    )
    assert (summary.kept, summary.rejected) == (4, {})
    assert len(rephraser.log) == 4
    for prompt in rephraser.log:  # the question alone: no sentence of any chunk
        assert not any(text[:40] in prompt for text in LIGHTS.values())
    questions = read_questions(out)
    assert {q.question for q in questions} == set(REPHRASED.values())
    for q in questions:
        meta = q.extra["testset"]
        assert REPHRASED[meta["first_draft"]] == q.question
        assert meta["rephraser"] == "Rephraser" and meta["writer_calls"] == 2
    assert summary.writer_calls == 8  # a draft and a rephrasing each


def test_the_default_rephraser_is_the_answer_model_in_force(tmp_path, monkeypatch):
    from hyde_lc.evaluation import question_writer, testset

    specs, made = [], Rephraser()

    def load_llm(spec, role, max_tokens):
        specs.append((spec, role, max_tokens))
        return made

    monkeypatch.setattr("hyde_lc.models.loading.load_llm", load_llm)
    monkeypatch.setenv("HYDE_LC_ANSWER_LLM", "local:smollm2-135m")  # read at each call
    assert testset.default_rephraser is question_writer.default_rephraser
    summary = make_testset(source(), tmp_path / "q.jsonl", n=2, writer=ByChunk(), progress=False)
    assert summary.kept == 2 and len(made.log) == 2  # every draft rephrased
    assert specs == [("local:smollm2-135m", "answer", question_writer.REPHRASER_MAX_TOKENS)]


def test_a_rephrasing_that_still_copies_is_dropped_without_a_rewrite(tmp_path):
    draft = GOOD["bell"].splitlines()[0].removeprefix("Question: ")
    copy = "Who completed it in 1810 after four summers of work?"
    writer = ByChunk()
    out = tmp_path / "q.jsonl"
    summary = make_testset(source(), out, n=4, writer=writer,
                           rephraser=Rephraser(script={draft: copy}), progress=False)  # fmt: skip
    assert summary.kept == 3 and summary.rejected == {"copies": 1}
    assert len(writer.log) == 4  # the writer is never asked for a rewrite
    (dropped,) = [json.loads(line) for line in rejected_path(out).read_text().splitlines()]
    assert (dropped["question"], dropped["first_draft"]) == (copy, draft)


def test_resuming_with_another_rephraser_is_refused(tmp_path):
    out = tmp_path / "q.jsonl"
    make_testset(source(), out, n=2, writer=ByChunk(), rephraser=Rephraser(), progress=False)
    with pytest.raises(HydeLcError, match="same --rephraser"):
        make_testset(source(), out, n=4, writer=ByChunk(), progress=False, rephraser=None)
    summary = make_testset(source(), out, n=4, writer=ByChunk(), rephraser=Rephraser(),
                           progress=False)  # fmt: skip
    assert summary.resumed == 2 and summary.kept == 4


def test_a_chinese_question_is_rephrased_in_chinese():
    from hyde_lc.evaluation.question_writer import parse_rephrase, rephrase_prompt

    prompt = rephrase_prompt("元代出钱重修泉州石湖那座石塔的是谁？")
    assert prompt.startswith("用日常的话") and "元代出钱重修" in prompt
    assert parse_rephrase("读者的问题：谁出钱修了石湖的古塔？") == "谁出钱修了石湖的古塔？"
    assert parse_rephrase("\n\n") is None


def test_unsupported_answers_and_questions_many_chunks_answer_are_dropped(tmp_path):
    rival = "Sostratus of Cnidus designed many works."

    def search(question, k):  # two other chunks rank above the reference and answer too
        return [Document(rival, id="r1"), Document(rival, id="r2"), Document("", id="pharos")]

    writer = ByChunk(script={"bell": "Question: Which engineer built the reef tower?\n"
                                     "Answer: Thomas Telford"})  # fmt: skip
    out = tmp_path / "q.jsonl"
    summary = make_testset(
        source(search=search), out, n=4, writer=writer, progress=False, rephraser=None
    )
    assert summary.rejected == {"unsupported": 1, "not specific": 1}
    assert {q.reference_context_ids[0] for q in read_questions(out)} == {"eddy", "fresnel"}


def test_resume_keeps_what_was_written_and_asks_no_chunk_twice(tmp_path):
    out = tmp_path / "q.jsonl"
    first = ByChunk()
    make_testset(source(), out, n=2, writer=first, progress=False, rephraser=None)
    before = out.read_text()
    again = ByChunk()
    summary = make_testset(source(), out, n=4, writer=again, progress=False, rephraser=None)
    assert summary.resumed == 2 and summary.kept == 4
    assert out.read_text().startswith(before)
    assert len(first.log) + len(again.log) == 4  # each chunk asked once
    assert len({q.reference_context_ids[0] for q in read_questions(out)}) == 4
    assert (
        make_testset(source(), out, n=4, writer=ByChunk(), progress=False, rephraser=None).kept == 4
    )


def test_a_line_cut_short_by_a_kill_is_redone(tmp_path):
    out = tmp_path / "q.jsonl"
    make_testset(source(), out, n=2, writer=ByChunk(), progress=False, rephraser=None)
    lines = out.read_text().splitlines(keepends=True)
    out.write_text(lines[0] + lines[1][:40])  # the second line was being written
    summary = make_testset(source(), out, n=2, writer=ByChunk(), progress=False, rephraser=None)
    assert summary.resumed == 1 and summary.kept == 2
    assert len(read_questions(out)) == 2


def test_resuming_on_a_changed_collection_is_refused_naming_the_references(tmp_path):
    out = tmp_path / "q.jsonl"
    make_testset(source(), out, n=2, writer=ByChunk(), progress=False, rephraser=None)
    kept = [q.reference_context_ids[0] for q in read_questions(out)]
    changed = {k: v for k, v in LIGHTS.items() if k != kept[0]}
    with pytest.raises(HydeLcError, match=r"another state of the collection.*1 gone"):
        make_testset(source(changed), out, n=3, writer=ByChunk(), progress=False, rephraser=None)
    summary = make_testset(source(changed), out, n=2, writer=ByChunk(), progress=False,
                           resume=False, rephraser=None)  # fmt: skip
    assert summary.kept == 2 and kept[0] not in {
        q.reference_context_ids[0] for q in read_questions(out)
    }


def test_check_references_finds_gone_and_changed_chunks(tmp_path):
    out = tmp_path / "q.jsonl"
    make_testset(source(), out, n=4, writer=ByChunk(), progress=False, rephraser=None)
    questions = read_testset(out)
    assert check_references(questions, source()).same_collection
    edited = {**LIGHTS, "bell": LIGHTS["bell"] + " Edited.", "new": "another chunk"}
    del edited["eddy"]
    check = check_references(questions, source(edited))
    assert not check.same_collection
    assert [i for _, i in check.gone] == ["eddy"] and [i for _, i in check.changed] == ["bell"]
    assert "2 of 4 questions lost a reference" in check.describe()
    grown = check_references(questions, source({**LIGHTS, "new": "x"}))
    assert not grown.same_collection and not grown.broken_questions


def test_chinese_chunks_get_a_chinese_prompt_and_chinese_questions(tmp_path):
    chunk = (
        "六胜塔位于泉州石湖村，始建于北宋政和年间。元代至元二年，当地商人凌恢甫出资重建，"
        "塔高三十六米，为八角五层仿木结构的花岗岩石塔，是古代航海的重要标志。"
    )
    writer = PromptLog(responses=["问题：元代出钱重修泉州石湖那座石塔的是谁？\n答案：凌恢甫"])
    out = tmp_path / "zh.jsonl"
    summary = make_testset(
        ChunkSource("zh", [Document(chunk, id="zh1")]),
        out,
        n=1,
        writer=writer,
        progress=False,
        rephraser=None,
    )
    assert summary.kept == 1
    assert "请写一个这段文字能够回答的问题" in writer.seen[0]
    (q,) = read_questions(out)
    assert q.reference == "凌恢甫" and q.reference_context_ids == ["zh1"]


def test_a_chunk_without_an_id_is_refused():
    with pytest.raises(HydeLcError, match="no id"):
        ChunkSource("x", [Document("text")])


def test_to_ragas_dataset_has_the_reference_fields(tmp_path):
    pytest.importorskip("ragas")
    out = tmp_path / "q.jsonl"
    make_testset(source(), out, n=2, writer=ByChunk(), progress=False, rephraser=None)
    dataset = to_ragas_dataset(out)
    assert len(dataset) == 2
    sample = dataset.samples[0]
    assert sample.reference_contexts == [LIGHTS[read_testset(out)[0].reference_context_ids[0]]]
    assert sample.user_input == read_testset(out)[0].question
    assert sample.reference == read_testset(out)[0].reference


def test_a_question_file_without_reference_ids_is_no_test_set(tmp_path):
    path = tmp_path / "hand.jsonl"
    path.write_text('{"question": "Who built the Pharos?", "reference": "Sostratus"}\n')
    with pytest.raises(HydeLcError, match="no reference_context_ids"):
        read_testset(path)


def test_the_examples_in_the_docstrings_hold():
    import doctest

    from hyde_lc.evaluation import question_checks, question_writer, testset

    for module in (question_checks, question_writer, testset):
        assert doctest.testmod(module).failed == 0


def test_a_question_in_another_script_is_rephrased_in_its_own_language():
    from hyde_lc.evaluation.question_writer import rephrase_prompt

    prompt = rephrase_prompt("Кто построил маяк Белл-Рок?")
    assert "language of the question" in prompt and "passage" not in prompt
    assert "language" not in rephrase_prompt("Who built the Bell Rock light?")
