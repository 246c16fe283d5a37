import numpy as np
import pytest

from hyde_lc.core.fusion import concat_text, fuse_mean, reciprocal_rank_fusion


def test_fuse_mean_is_the_arithmetic_mean():
    vectors = [[1.0, 2.0, 3.0], [3.0, 0.0, -1.0], [-1.0, 4.0, 1.0]]
    assert fuse_mean(vectors) == pytest.approx([1.0, 2.0, 1.0])


def test_fuse_mean_weights_change_the_result():
    vectors = [[1.0, 0.0], [0.0, 1.0]]
    assert fuse_mean(vectors, weights=[3, 1]) == pytest.approx([0.75, 0.25])


def test_fuse_mean_of_one_vector_is_that_vector():
    assert fuse_mean([[0.2, -0.4]]) == pytest.approx([0.2, -0.4])


def test_fuse_mean_refuses_nothing():
    with pytest.raises(ValueError):
        fuse_mean([])


def test_rrf_scores_follow_the_formula():
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"], ["c", "a"]], c=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["b"] == pytest.approx(1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)


def test_rrf_rewards_agreement_over_one_top_rank():
    # "x" is first in one list only; "y" is second in all three.
    fused = reciprocal_rank_fusion([["x", "y"], ["z", "y"], ["w", "y"]])
    assert fused[0][0] == "y"


def test_rrf_weights_favour_a_ranking():
    fused = reciprocal_rank_fusion([["q"], ["h"]], weights=[2.0, 1.0])
    assert [item for item, _ in fused] == ["q", "h"]


def test_concat_text_puts_query_first_and_can_omit_it():
    assert concat_text("Q?", ["A.", "B."]) == "Q?\n\nA.\n\nB."
    assert concat_text(None, ["A."]) == "A."


def test_fuse_mean_preserves_direction_of_identical_vectors():
    v = np.array([0.6, 0.8])
    assert fuse_mean([v.tolist(), v.tolist()]) == pytest.approx(v.tolist())
