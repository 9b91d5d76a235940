"""The field's yardsticks as columns (`metrics.yardsticks`): the same numbers as the library functions called
directly, only the columns asked for, pointing NaN without a box, the identity a run records."""
import math

import numpy as np
import pytest
import torch

from iba_core.errors import UserError
from iba_core.metrics.aopc import aopc_curve
from iba_core.metrics.insertion_deletion import PROTOCOLS, insertion_deletion, protocol_from
from iba_core.metrics.pointing import pointing_scores
from iba_core.metrics.road import road_curves
from iba_core.metrics.yardsticks import (COLUMN_TEXT, COLUMNS, HIGHER_IS_BETTER, YARDSTICKS, YardstickOptions,
                                         check_metrics, columns_of, forward_passes, protocol_sentences,
                                         yardstick_columns, yardstick_identity)
from metric_helpers import SIZE, Counting, SmallConvNet


def _image_and_map(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 3, SIZE, SIZE, generator=g)
    values = torch.rand(SIZE, SIZE, generator=g).numpy().astype(np.float64)
    values[10:14, 20:24] += 2.0  # a peak, inside the box below
    return x, values


def test_columns_equal_the_library_functions_on_a_tiny_network():
    model = SmallConvNet()
    x, values = _image_and_map()
    box = np.zeros((SIZE, SIZE), dtype=bool)
    box[8:16, 18:26] = True
    protocol = protocol_from("rise", step=64)  # 17 points on a 32 × 32 crop
    options = YardstickOptions(protocol=protocol, road_removed=(20, 50, 80), tolerance=2, batch_size=8, seed=5)
    got = yardstick_columns(model, x, values, 2, YARDSTICKS, box_mask=box, options=options)
    assert tuple(got) == COLUMNS
    curves = insertion_deletion(model, x, values, 2, protocol, batch_size=8, seed=5)
    road = road_curves(model, x, values, 2, (20, 50, 80), batch_size=8, seed=5)
    points = pointing_scores(values, box, 2)
    want = {"insertion_auc": curves.insertion_auc, "deletion_auc": curves.deletion_auc,
            "road_morf": road.morf_score, "road_lerf": road.lerf_score, "road_combined": road.combined,
            "pointing_hit": points["pointing_hit"], "energy_pointing": points["energy_pointing"], "ehr": points["ehr"],
            "aopc_morf": aopc_curve(model, x, values, 2, batch_size=8).aopc}  # the registry's example metric
    for column in COLUMNS:
        assert got[column] == pytest.approx(want[column], rel=1e-4, abs=1e-6), column
    assert got["pointing_hit"] == 1.0  # the peak lies in the box
    for column in ("insertion_auc", "deletion_auc", "energy_pointing"):
        assert 0.0 <= got[column] <= 1.0


def test_only_the_columns_asked_for_and_only_their_forward_passes():
    model = Counting(SmallConvNet())
    x, values = _image_and_map(1)
    options = YardstickOptions(protocol=protocol_from("rise", step=128), batch_size=64)
    got = yardstick_columns(model, x, values, 0, ["deletion"], options=options)
    assert list(got) == ["deletion_auc"]
    assert model.images == forward_passes(["deletion"], SIZE * SIZE, options) == SIZE * SIZE // 128 + 1
    said = []
    model.images = 0
    got = yardstick_columns(model, x, values, 0, ["road", "insertion"], options=options, told=said.append)
    assert list(got) == ["insertion_auc", "road_morf", "road_lerf", "road_combined"]
    assert said == ["insertion", "road"]
    assert model.images == forward_passes(["insertion", "road"], SIZE * SIZE, options) == 9 + 2 * 9 + 1


def test_pointing_without_a_box_is_nan():
    x, values = _image_and_map()
    for box in (None, np.zeros((SIZE, SIZE), dtype=bool)):
        got = yardstick_columns(SmallConvNet(), x, values, 0, ["pointing"], box_mask=box)
        assert set(got) == {"pointing_hit", "energy_pointing", "ehr"} and all(math.isnan(v) for v in got.values())


def test_names_checked_directions_said_and_the_identity_holds_the_protocol():
    assert check_metrics(["road", " Insertion", "road"]) == ("insertion", "road")
    with pytest.raises(UserError, match="Unknown metric 'auc'; choose from insertion, deletion, road, pointing"):
        check_metrics(["auc"])
    assert columns_of(["pointing", "deletion"]) == ("deletion_auc", "pointing_hit", "energy_pointing", "ehr")
    for column in COLUMNS:  # every column says which way is better, and it agrees with HIGHER_IS_BETTER
        assert ("higher is better" if HIGHER_IS_BETTER[column] else "lower is better") in COLUMN_TEXT[column]
    ident = yardstick_identity(["insertion", "pointing"], YardstickOptions(protocol=PROTOCOLS["coiba"], tolerance=9))
    assert ident["metrics"] == ["insertion", "pointing"] and ident["protocol"]["step"] == 1792
    assert ident["tolerance"] == 9 and "road_removed" not in ident
    sentences = protocol_sentences(ident)
    assert sentences[0] == PROTOCOLS["coiba"].describe() and "9 px" in sentences[-1]
