"""The self-test's measures by hand on hand-made maps (issue #42, item 2): the localisation ratio (1 = chance), the
AUROC of the mass inside the mark, the reaction and its verdict, the ranking."""
import json

import numpy as np
import pytest

from iba_core.selftest.scores import (MethodScore, localisation_ratio, mass_auroc, mass_share, rank_methods,
                                      reaction_of, region_weights)

#: A 4 × 4 crop whose mark covers the top-left 2 × 2 pixels: a quarter of the crop.
REGION = np.zeros((4, 4), bool)
REGION[:2, :2] = True


def test_mass_share_counts_the_positive_mass_inside_the_region():
    values = np.zeros((4, 4))
    values[0, 0], values[3, 3], values[2, 2] = 3.0, 1.0, -5.0  # the negative part does not count
    assert mass_share(values, REGION.astype(float)) == pytest.approx(0.75)
    assert mass_share(np.zeros((4, 4)), REGION.astype(float)) == 0.0  # a map that shows nothing
    assert mass_share(-np.ones((4, 4)), REGION.astype(float)) == 0.0


def test_the_localisation_ratio_by_hand():
    clean = [np.ones((4, 4)), np.ones((4, 4)), np.ones((4, 4))]
    first = np.ones((4, 4))
    first[0, 0] += 3.0  # 3 of the difference inside the mark,
    first[3, 3] += 1.0  # 1 outside: a share of 0.75
    second = np.ones((4, 4))
    second[3, 0] += 2.0  # all of it outside: 0
    spread = np.full((4, 4), 2.0)  # an even rise: the mark's share of the crop, 0.25 (chance)
    # mean share (0.75 + 0 + 0.25) / 3 = 1/3, over the region's share 1/4
    assert localisation_ratio(clean, [first, second, spread], REGION) == pytest.approx(4 / 3)
    assert localisation_ratio(clean[:1], [spread], REGION) == pytest.approx(1.0)  # chance is 1
    inside = np.ones((4, 4))
    inside[:2, :2] += 1.0
    assert localisation_ratio(clean[:1], [inside], REGION) == pytest.approx(4.0)  # its ceiling: 1 / region share
    assert np.isnan(localisation_ratio([], [], REGION))


def test_a_coarser_map_weighs_each_cell_by_the_share_it_covers():
    weights = region_weights(REGION, (2, 2))
    assert np.allclose(weights, [[1, 0], [0, 0]])
    odd = np.zeros((4, 4), bool)
    odd[:1, :2] = True  # half of the top-left cell
    assert np.allclose(region_weights(odd, (2, 2)), [[0.5, 0], [0, 0]])


def test_the_auroc_by_hand():
    # marked above clean in 3 of the 4 (marked, clean) pairs: 0.2 > 0.1, 0.2 < 0.3, 0.4 > 0.1, 0.4 > 0.3
    assert mass_auroc([0.1, 0.3], [0.2, 0.4]) == pytest.approx(0.75)
    assert mass_auroc([0.1, 0.2], [0.5, 0.6]) == 1.0
    assert mass_auroc([0.2, 0.2], [0.2, 0.2]) == 0.5  # no separation: chance
    assert np.isnan(mass_auroc([], []))


def test_the_reaction_by_hand():
    p_clean = np.array([[0.9, 0.1, 0.0], [0.8, 0.2, 0.0]])
    p_marked = np.array([[0.3, 0.7, 0.0], [0.7, 0.3, 0.0]])
    r = reaction_of(p_clean, p_marked, own=[0, 0], names=["a", "b", "c"])
    assert r.delta_p_own == pytest.approx(-0.35) and r.p_own_clean == pytest.approx(0.85)
    assert r.changed_share == 0.5 and r.changed_to == {"b": 1}
    assert r.toward == 1 and r.toward_name == "b" and r.toward_rise == pytest.approx(0.35)
    assert r.toward_ratio == pytest.approx(0.5 / 0.15) and r.reacts
    assert r.verdict == ("your model reacts to this mark: p(b) ×3.3 (0.15 → 0.50); 50% of predictions change, "
                         "most to b")


def test_a_model_that_hardly_reacts_gets_the_caution():
    p_clean = np.array([[0.9, 0.1], [0.8, 0.2]])
    r = reaction_of(p_clean, p_clean + [[-0.01, 0.01], [0.0, 0.0]], own=[0, 0], names=["a", "b"])
    assert not r.reacts and r.changed_share == 0
    assert r.verdict.startswith("your model hardly reacts to this mark (mean Δp(own class) -0.005, 0% of predictions "
                                "change")
    assert r.verdict.endswith("a map has nothing to show, so this test cannot rank the methods")


def test_a_drop_of_the_own_class_alone_is_a_reaction():
    p_clean = np.full((2, 10), 0.02)
    p_clean[:, 0] = 0.82
    p_marked = np.full((2, 10), 0.04)  # the own class loses 0.46, spread over nine classes (+0.02 each)
    p_marked[:, 0] = 0.64 - 0.28
    r = reaction_of(p_clean, p_marked, own=[0, 0], names=[str(i) for i in range(10)])
    assert r.reacts and r.toward_rise < 0.05
    assert r.verdict.startswith("your model reacts to this mark: p(own class) ×0.44 (0.82 → 0.36)")


def test_predictions_flipping_to_one_class_are_a_reaction():
    """A near tie on every image: p(b) rises by 0.04 only, yet every prediction changes to b: the model reacts, and the
    verdict says so instead of "hardly reacts … 100% of predictions change"."""
    p_clean, p_marked = np.tile([0.52, 0.48], (4, 1)), np.tile([0.48, 0.52], (4, 1))
    r = reaction_of(p_clean, p_marked, own=[0] * 4, names=["a", "b"])
    assert r.toward_rise < 0.05 and abs(r.delta_p_own) < 0.05 and r.reacts
    assert r.verdict == ("your model reacts to this mark: most predictions change to b (100% of the images; 100% "
                         "change in all), though no class gains 0.05 on average (mean Δp(own class) -0.040)")
    # a near tie's single flip (one of two images) does not count
    one = reaction_of(p_clean[:2], np.array([[0.48, 0.52], [0.52, 0.48]]), own=[0, 0], names=["a", "b"])
    assert one.changed_share == 0.5 and not one.reacts and "hardly reacts" in one.verdict
    # every prediction changes, but to two classes alike: no class takes most of them
    split = np.array([[0.32, 0.36, 0.32], [0.32, 0.36, 0.32], [0.32, 0.32, 0.36], [0.32, 0.32, 0.36]])
    two = reaction_of(np.tile([0.36, 0.32, 0.32], (4, 1)), split, own=[0] * 4, names=["a", "b", "c"])
    assert two.changed_share == 1.0 and not two.reacts


def test_a_probability_that_underflows_gives_a_floored_ratio_not_infinity():
    p_clean = np.array([[1.0, 0.0], [1.0, 0.0]])  # p(b) underflows to 0 on the clean copies
    p_marked = np.array([[0.1, 0.9], [0.2, 0.8]])
    r = reaction_of(p_clean, p_marked, own=[0, 0], names=["a", "b"])
    assert r.toward_ratio == pytest.approx(0.85 / 0.001)
    assert r.verdict.startswith("your model reacts to this mark: p(b) ×850 or more (from below 0.001 to 0.85)")
    assert "inf" not in r.verdict
    assert json.loads(json.dumps(r.as_dict(), allow_nan=False))["toward_ratio"] == pytest.approx(850)


def _score(method: str, target: str, ratio: float, auroc: float) -> MethodScore:
    return MethodScore(method, method, target, 8, ratio, auroc, 0.1, 0.5, 64.0)


def test_the_ranking_follows_the_ratio_then_the_auroc_of_the_toward_class():
    scores = [_score("a", "own", 50.0, 1.0), _score("a", "toward", 10.0, 0.9), _score("b", "toward", 30.0, 0.6),
              _score("c", "toward", 10.0, 1.0), _score("d", "toward", float("nan"), 0.5)]
    assert rank_methods(scores, reacts=True) == ["b", "c", "a"]  # the toward class's; a tie broken by the AUROC
    assert [s.rank for s in scores] == [None, 3, 1, 2, None]
    own_only = [_score("a", "own", 2.0, 0.7), _score("b", "own", 5.0, 0.6)]
    assert rank_methods(own_only, reacts=True) == ["b", "a"]
    unranked = [_score("a", "own", 2.0, 0.7)]
    assert rank_methods(unranked, reacts=False) == [] and unranked[0].rank is None
