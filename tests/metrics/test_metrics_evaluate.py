"""The evaluation loop: resumable JSONL, rank sharding, and a CLI smoke test on the offline model."""
import collections
import json

import numpy as np
import pytest

from iba_core.cli import main
from iba_core.errors import UserError
from iba_core.methods import Method, get_method, resolve_methods
from iba_core.metrics.runner import EvalOptions, finish, run_evaluation
from iba_core.image_folders import list_items
from iba_core.metrics.results import read_records, table_path
from metric_helpers import SIZE, TILE, Counting, SmallConvNet, StubLoaded, write_images

N_IMAGES, FAIL_AT = 6, 2
PER_PAIR = 2 * (SIZE // TILE) ** 2  # degradation images per (image, method) with every step measured


class Interrupted(RuntimeError):
    pass


class FlakyMethod(Method):
    """Gradient-free stand-in that 'crashes the run' on the image after `fail_after` images."""

    key, name, signed, unit = "flaky", "Flaky", False, ""

    def __init__(self, fail_after=None):
        super().__init__()
        self.fail_after, self.calls = fail_after, 0

    def _compute(self, network, x, target):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise Interrupted("simulated crash")
        self.calls += 1
        return x[0].abs().sum(0).numpy()


def options():
    return EvalOptions(tiles=[TILE], batch_size=64, progress=False)


def test_interrupted_evaluation_resumes_without_redoing_or_losing(tmp_path):
    items = list_items(write_images(tmp_path / "imgs", N_IMAGES)[0].parent)
    out = tmp_path / "results.jsonl"
    model = Counting(SmallConvNet())
    network = StubLoaded(model)
    with pytest.raises(Interrupted):
        run_evaluation("degradation", network, items, {"random": get_method("random"), "flaky": FlakyMethod(FAIL_AT)},
                       out, options())
    first = read_records(out)
    # Images 0..FAIL_AT-1 complete, and image FAIL_AT's 'random' record was kept too.
    assert len(first) == 2 * FAIL_AT + 1

    model.images = 0
    written = run_evaluation("degradation", network, items, {"random": get_method("random"), "flaky": FlakyMethod()},
                             out, options())
    records = read_records(out)
    lines = out.read_text().splitlines()
    assert written == 2 * N_IMAGES - len(first) and len(lines) == len(records) == 2 * N_IMAGES
    counts = collections.Counter((r["image"], r["method"]) for r in map(json.loads, lines))
    assert set(counts.values()) == {1} and len(counts) == 2 * N_IMAGES
    # Model work on resume: image FAIL_AT needs its top-1 pass and one method; the rest everything.
    remaining_images = N_IMAGES - FAIL_AT - 1
    assert model.images == (1 + PER_PAIR) + remaining_images * (1 + 2 * PER_PAIR)

    # A third run has nothing left to do and runs the model not at all.
    model.images = 0
    assert run_evaluation("degradation", network, items, {"random": get_method("random"), "flaky": FlakyMethod()},
                          out, options()) == 0
    assert model.images == 0
    text = finish(out, 0, 1, print_table=False)
    assert "Flaky" in text and "Random" in text and table_path(out).read_text() == text


def test_ranks_shard_the_images_and_the_last_one_merges(tmp_path, monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    items = list_items(write_images(tmp_path / "imgs", 5)[0].parent)
    out = tmp_path / "results.jsonl"
    network = StubLoaded(SmallConvNet())
    methods = {"random": get_method("random")}
    run_evaluation("degradation", network, items, methods, out, options(), rank=0, world=2)
    assert finish(out, 0, 2, print_table=False) is None and not out.exists()  # rank 1 not done yet
    run_evaluation("degradation", network, items, methods, out, options(), rank=1, world=2)
    assert finish(out, 1, 2, print_table=False) is not None
    ranks = [sorted(r["image"] for r in read_records(tmp_path / f"results.rank{k}.jsonl")) for k in (0, 1)]
    assert ranks == [["img00.png", "img02.png", "img04.png"], ["img01.png", "img03.png"]]
    assert sorted(r["image"] for r in read_records(out)) == [f"img{i:02d}.png" for i in range(5)]


def test_every_metric_runs_through_the_loop(tmp_path, tiny_stats):
    """bbox, sensitivity-n and sanity on the stub network (beta-table needs a Network: smoke-tested below)."""
    folder = write_images(tmp_path / "imgs", 2)[0].parent
    items = list_items(folder)
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    box = "<annotation><size><width>32</width><height>32</height></size><object><name>x</name><bndbox>" \
          "<xmin>{}</xmin><ymin>0</ymin><xmax>{}</xmax><ymax>8</ymax></bndbox></object></annotation>"
    (boxes / "img00.xml").write_text(box.format(0, 8))  # 1/16 of the image
    (boxes / "img01.xml").write_text(box.format(0, 32))  # 1/4 of the image … with height 8: 25 %
    (boxes / "img01.xml").write_text(box.format(0, 32).replace("<ymax>8", "<ymax>16"))  # 50 %: skipped
    network = StubLoaded(SmallConvNet())
    methods = {"random": get_method("random")}
    out = tmp_path / "all.jsonl"
    opts = EvalOptions(tiles=[TILE], progress=False, boxes=boxes, sets=8, n_count=3)
    for metric in ("bbox", "sensitivity-n", "sanity"):
        run_evaluation(metric, network, items, methods, out, opts)
    by_metric = collections.defaultdict(list)
    for r in read_records(out):
        by_metric[r["metric"]].append(r)
    assert [r.get("skipped") is None for r in by_metric["bbox"]] == [True, False]
    assert len(by_metric["sensitivity-n"]) == 2 and len(by_metric["sensitivity-n"][0]["corr"]) == 3
    assert by_metric["sanity"][0]["levels"] == ["fc", "conv2", "conv1"]
    text = finish(out, 0, 1, print_table=False)
    assert "Bounding box" in text and "Sensitivity-n" in text and "Sanity" in text


def test_cli_smoke_on_the_offline_model(tmp_path, capsys):
    from iba_core.images import load_sample

    folder = tmp_path / "photos"
    folder.mkdir()
    for i, name in enumerate(("chelsea", "coffee", "astronaut")):
        load_sample(name).save(folder / f"{i}_{name}.jpg")
    methods = ["random", "saliency"]  # the cheapest baseline and a gradient method
    out = tmp_path / "results.jsonl"
    argv = ["evaluate", "degradation", "--images", str(folder), "--limit", "2", "--methods", *methods,
            "--tile", "14", "--points", "3", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    records = read_records(out)
    assert len(records) == 2 * len(methods)
    assert {r["image"] for r in records} == {"0_chelsea.jpg", "1_coffee.jpg"}
    assert {r["target"] for r in records} == {285, 967}  # top-1 classes of the offline network
    assert all(r["removed"] == [0, 128, 256] and r["tile"] == 14 for r in records)
    table = capsys.readouterr().out
    assert "deg. 14x14" in table and table_path(out).is_file()
    assert main(argv) == 0 and len(out.read_text().splitlines()) == 2 * len(methods)  # resumed: nothing new


def test_unknown_method_is_a_clear_error():
    with pytest.raises(UserError, match="Unknown attribution method"):
        resolve_methods(["no-such-method"])


def test_cli_beta_table_smoke_on_a_labelled_folder(tmp_path, capsys):
    from iba_core.images import load_sample

    (tmp_path / "val" / "285").mkdir(parents=True)
    load_sample("chelsea").save(tmp_path / "val" / "285" / "chelsea.jpg")
    out = tmp_path / "beta.jsonl"
    argv = ["evaluate", "beta-table", "--images", str(tmp_path / "val"), "--beta-k", "10", "--steps", "2",
            "--stats-n", "96", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    rows = {r["column"]: r for r in read_records(out) if r["method"] == "per_sample"}
    assert set(rows) == {"orig", "initial", "beta_k=10"}
    assert rows["orig"]["top1"] == 1.0 and rows["orig"]["label"] == 285
    assert rows["beta_k=10"]["info_per_k"] < rows["initial"]["info_per_k"]
    assert "Orig." in capsys.readouterr().out


def test_beta_table_refuses_unlabelled_images(tmp_path):

    write_images(tmp_path / "imgs", 1)
    assert main(["evaluate", "beta-table", "--images", str(tmp_path / "imgs"), "--out",
                 str(tmp_path / "r.jsonl"), "--no-progress"]) == 1


def test_road_runs_through_the_loop_and_resumes(tmp_path):
    items = list_items(write_images(tmp_path / "imgs", 2)[0].parent)
    out = tmp_path / "road.jsonl"
    model = Counting(SmallConvNet())
    network = StubLoaded(model)
    methods = {"random": get_method("random"), "flaky": FlakyMethod()}
    opts = EvalOptions(progress=False, road_removed=[25, 75], road_noise=0.02, seed=3)
    assert run_evaluation("road", network, items, methods, out, opts) == 4
    records = read_records(out)
    assert all(r["removed"] == [25.0, 75.0] and r["noise"] == 0.02 and len(r["morf"]) == len(r["lerf"]) == 2
               for r in records)
    assert all(r["setting"].endswith("|removed=25,75|noise=0.02|seed=3") for r in records)
    assert all(r["combined"] == pytest.approx((r["lerf_score"] - r["morf_score"]) / 2) for r in records)
    model.images = 0
    assert run_evaluation("road", network, items, methods, out, opts) == 0 and model.images == 0  # resumed
    other = EvalOptions(progress=False, road_removed=[25, 75], road_noise=0.0, seed=3)  # another setting
    assert run_evaluation("road", network, items, {"random": get_method("random")}, out, other) == 2
    text = finish(out, 0, 1, print_table=False)
    assert "ROAD" in text and "Flaky" in text and "σ 0.02" in text and "σ 0" in text


def test_cli_road_on_the_offline_model_resumes_and_refuses_bad_percentages(tmp_path, capsys):
    from iba_core.images import load_sample

    folder = tmp_path / "photos"
    folder.mkdir()
    load_sample("chelsea").save(folder / "chelsea.jpg")
    out = tmp_path / "road.jsonl"
    argv = ["evaluate", "road", "--images", str(folder), "--methods", "random", "--removed", "30", "70",
            "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    (record,) = read_records(out)
    assert record["target"] == 285 and record["removed"] == [30.0, 70.0] and record["noise"] == 0.01
    assert 0 <= record["morf_score"] <= 1 and "precision" in record
    assert "ROAD" in capsys.readouterr().out
    assert main(argv) == 0 and len(out.read_text().splitlines()) == 1  # resumed: nothing new
    for bad in (["--removed", "0"], ["--removed", "50", "100"], ["--noise", "-1"]):
        assert main([*argv, *bad]) == 1
        assert "ROAD" in capsys.readouterr().err
# --------------------------------------------------------------------------------------------
# insertion / deletion and pointing (issue #29)


def voc_box(width, height, xmin, ymin, xmax, ymax) -> str:
    return (f"<annotation><size><width>{width}</width><height>{height}</height></size><object><name>x</name>"
            f"<bndbox><xmin>{xmin}</xmin><ymin>{ymin}</ymin><xmax>{xmax}</xmax><ymax>{ymax}</ymax></bndbox>"
            "</object></annotation>")


def test_a_bad_box_file_skips_its_image_by_name_and_the_rest_is_measured(tmp_path):
    """Issue #40, item 7: one empty XML among many aborted the whole evaluation without naming the file; an inverted
    box was "skipped" without a word. Each is now skipped, named and counted in the table's note."""
    from iba_core.metrics.pointing import format_table

    items = list_items(write_images(tmp_path / "imgs", 4)[0].parent)
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    (boxes / "img00.xml").write_text(voc_box(SIZE, SIZE, 0, 0, 8, 8))
    (boxes / "img01.xml").write_text("")  # empty
    (boxes / "img02.xml").write_text(voc_box(SIZE, SIZE, 20, 20, 4, 4))  # inverted
    (boxes / "img03.xml").write_text(voc_box(SIZE, SIZE, 8, 8, 32, 32))
    out = tmp_path / "pointing.jsonl"
    run_evaluation("pointing", StubLoaded(Counting(SmallConvNet())), items, {"random": get_method("random")}, out,
                   EvalOptions(progress=False, boxes=boxes, tolerance=3))
    records = read_records(out)
    skipped = {r["image"]: r["skipped"] for r in records if r.get("skipped")}
    assert sorted(skipped) == ["img01.png", "img02.png"]
    assert skipped["img01.png"].startswith("img01.xml unreadable: Not a readable VOC XML annotation")
    assert skipped["img02.png"].startswith("img02.xml unreadable: The annotation's box 'x' is inverted or empty")
    assert {r["image"] for r in records if not r.get("skipped")} == {"img00.png", "img03.png"}
    assert "2 image(s) skipped: img01.xml unreadable" in format_table(records)


def test_insertion_deletion_and_pointing_run_through_the_loop_and_resume(tmp_path):
    from iba_core.metrics.insertion_deletion import PixelProtocol

    items = list_items(write_images(tmp_path / "imgs", 3)[0].parent)
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    (boxes / "img00.xml").write_text(voc_box(SIZE, SIZE, 0, 0, 8, 8))
    (boxes / "img01.xml").write_text(voc_box(SIZE, SIZE, 8, 8, 32, 32))  # img02: no annotation
    model = Counting(SmallConvNet())
    network = StubLoaded(model)
    methods = {"random": get_method("random"), "flaky": FlakyMethod()}
    out = tmp_path / "yardsticks.jsonl"
    protocol = PixelProtocol("test", 100, "blur", 5, 2.0)  # 1024 pixels: 11 steps, 12 points
    opts = EvalOptions(progress=False, boxes=boxes, protocol=protocol, tolerance=3, batch_size=16)
    for metric in ("insertion", "deletion", "pointing"):
        run_evaluation(metric, network, items, methods, out, opts)
    by_metric = collections.defaultdict(list)
    for r in read_records(out):
        by_metric[r["metric"]].append(r)
    assert len(by_metric["insertion"]) == len(by_metric["deletion"]) == 3 * 2
    ins, dele = by_metric["insertion"][0], by_metric["deletion"][0]
    assert len(ins["insertion"]) == 12 and "deletion" not in ins and 0 <= ins["insertion_auc"] <= 1
    assert len(dele["deletion"]) == 12 and "insertion" not in dele and dele["protocol"]["step"] == 100
    assert protocol.identity() in ins["setting"] and ins["precision"] == "fp32"
    # Deletion to the blur ends where insertion starts (same image, same map order, same blur).
    assert dele["deletion"][-1] == pytest.approx(ins["insertion"][0], rel=1e-5)
    pointing = {(r["image"], r["method"]): r for r in by_metric["pointing"]}
    assert pointing[("img02.png", "*")]["skipped"] == "no annotation"
    assert {pointing[("img00.png", m)]["tolerance"] for m in methods} == {3}
    assert all(pointing[("img01.png", m)]["pointing_hit"] in (0.0, 1.0) for m in methods)
    # The flaky method's map is |x| summed: energy pointing is its positive mass in the box, by hand.
    x = network.preprocess(network.preprocess.load(tmp_path / "imgs" / "img01.png"))
    values = x[0].abs().sum(0).numpy()
    assert pointing[("img01.png", "flaky")]["energy_pointing"] == pytest.approx(
        values[8:, 8:].sum() / values.sum(), rel=1e-6)
    box = np.zeros(values.shape, dtype=bool)
    box[8:, 8:] = True  # the image's box on the crop, as the energy above counts it
    assert pointing[("img01.png", "flaky")]["box_share"] == pytest.approx(box.mean())

    # Resumed: nothing new, no forward pass; another protocol is another key.
    model.images = 0
    for metric in ("insertion", "deletion", "pointing"):
        assert run_evaluation(metric, network, items, methods, out, opts) == 0
    assert model.images == 0
    other = EvalOptions(progress=False, protocol=PixelProtocol("test", 512, "zeros", 5, 2.0), batch_size=16)
    assert run_evaluation("deletion", network, items[:1], methods, out, other) == 2
    text = finish(out, 0, 1, print_table=False)
    assert "deletion AUC (lower is better)" in text and "insertion AUC (higher is better)" in text
    assert protocol.describe() in text and "pointing hit rate" in text and "1 image(s) skipped" in text


def test_cli_insertion_deletion_and_pointing_on_the_offline_model(tmp_path, capsys):
    from iba_core.images import load_sample

    folder, boxes = tmp_path / "photos", tmp_path / "boxes"
    folder.mkdir()
    boxes.mkdir()
    image = load_sample("chelsea")
    image.save(folder / "chelsea.jpg")
    w, h = image.size
    (boxes / "chelsea.xml").write_text(voc_box(w, h, w // 4, h // 8, 3 * w // 4, h))
    out = tmp_path / "yard.jsonl"
    common = ["--images", str(folder), "--methods", "random", "saliency", "--out", str(out), "--no-progress"]
    pixel = ["--protocol", "coiba", "--step", "12544"]  # 224² / 12544 = 4 steps, 5 points
    for metric, extra in (("deletion", pixel), ("insertion", pixel), ("pointing", ["--boxes", str(boxes)])):
        assert main(["evaluate", metric, *common, *extra]) == 0
    records = read_records(out)
    assert len(records) == 6 and {r["target"] for r in records} == {285}
    dele = next(r for r in records if r["metric"] == "deletion" and r["method"] == "saliency")
    assert dele["fraction"] == [0, 0.25, 0.5, 0.75, 1] and dele["protocol"]["name"] == "coiba, modified"
    assert dele["protocol"]["blur_kernel"] == 51 and "step=12544|del=blur|blur=51/50" in dele["setting"]
    table = capsys.readouterr().out
    assert "Pointing game" in table and "Protocol CoIBA, modified: 12,544 pixels a step" in table
    lines = len(out.read_text().splitlines())
    assert main(["evaluate", "deletion", *common, *pixel]) == 0  # resumed: nothing new
    assert len(out.read_text().splitlines()) == lines


@pytest.mark.parametrize("argv, sentence", [
    (["deletion", "--blur-kernel", "10"], "blur kernel must be an odd number"),
    (["insertion", "--blur-sigma", "-1"], "σ must be between 0.1 and 1000 pixels"),
    (["pointing"], "Pointing game needs --boxes"),
    (["pointing", "--boxes", ".", "--tolerance", "-2"], "--tolerance must be 0 pixels or more"),
])
def test_cli_bad_insertion_deletion_and_pointing_values_get_one_sentence(tmp_path, capsys, argv, sentence):
    write_images(tmp_path / "imgs", 1)
    code = main(["evaluate", argv[0], "--images", str(tmp_path / "imgs"), "--out", str(tmp_path / "r.jsonl"),
                 "--no-progress", *argv[1:]])
    err = capsys.readouterr().err
    assert code == 1 and sentence in err and "Traceback" not in err
