"""A CLIP model in the app (issue #30): added from its folder with the "Add your network" form, then explained by
text prompts on the Per-Sample page (one map per prompt, "similarity" in place of p(target), M2IB's β·k), and a
prompt run searched on the Dataset page."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean, clean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clip_fixtures import save_tiny_clip  # noqa: E402

from iba_core.methods import get_method  # noqa: E402
from iba_core.networks import load_network  # noqa: E402
from iba_core.runs import FolderSettings, finish_run, list_images, run_folder  # noqa: E402

CARD_KEY = "card:tiny-clip"
PROMPTS_KEY = f"ps_prompts_{CARD_KEY}"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """The models folder (IBA_MODELS_DIR), holding a tiny random CLIP folder to add (src-clip/, no card yet)."""
    root = tmp_path_factory.mktemp("models")
    save_tiny_clip(root / "src-clip")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_MODELS_DIR", str(root))
        yield root



def added(at: AppTest, models: Path) -> AppTest:
    """The CLIP folder added through the form (once per module: later calls find its card and choose it)."""
    card = models / "tiny-clip" / "tiny-clip.toml"
    if not card.exists():
        clean(at.radio(key="add_source").set_value("folder").run())  # the folder's fields appear
        at.text_input(key="add_name").set_value("tiny-clip")
        at.text_input(key="add_folder_path").set_value(str(models / "src-clip"))
        clean(at.button(key="add_network_button").click().run())
        assert card.exists()
    return clean(at.selectbox(key="network").set_value(str(card.resolve())).run())


def test_the_form_shows_what_a_clip_folder_is_then_adds_it(open_page, models) -> None:
    at = open_page("per_sample")
    clean(at.radio(key="add_source").set_value("folder").run())
    at.text_input(key="add_name").set_value("checked-clip")
    at.text_input(key="add_folder_path").set_value(str(models / "src-clip"))
    at = clean(at.button(key="add_check_button").click().run())
    preview = " ".join(m.value for m in at.markdown)
    assert "similarity" in preview and "text prompts you type" in preview
    assert not (models / "checked-clip").exists()  # Check adds nothing
    at = added(at, models)
    assert at.text_area(key=PROMPTS_KEY).value.splitlines() == ["a photo of a cat", "a photo of a dog"]


def test_two_prompts_give_two_maps_with_similarity_and_m2ib_beta(open_page, models) -> None:
    at = added(open_page("per_sample"), models)
    assert at.select_slider(key="ps_beta_similarity").value == 0.1  # M2IB's β, the similarity head's default
    at.text_area(key=PROMPTS_KEY).set_value("a cat\n\n  a   dog \n")
    at.number_input(key="ps_steps").set_value(2)
    at.number_input(key="ps_batch").set_value(2)
    at = clean(at.button(key="ps_run_button").click().run())
    records = at.session_state["ps_prompt_runs"]
    assert [r.class_name for r in records] == ["a cat", "a dog"]
    assert not np.allclose(records[0].result.heatmap, records[1].result.heatmap)
    assert all(r.result.settings.beta_k == 0.1 for r in records)
    labels = [m.label for m in at.metric]
    assert "similarity without bottleneck" in labels and not any("p(target)" in label for label in labels)
    shown = {m.label: m.value for m in at.metric}["similarity without bottleneck"]
    assert "%" not in shown and float(shown) == pytest.approx(records[0].result.p_without, abs=5e-4)
    # a classifier's thresholds (a lost class below 1 %, a hardly predicted one below 10 %) never judge a cosine
    assert not any("lost:" in w.value or "Hardly predicted" in w.value for w in at.warning)
    text = " ".join(m.value for m in at.markdown)
    assert "One map per prompt" in text and "“a dog”" in text and "p(target)" not in text
    # which words carry the information (M2IB's text side), under the maps
    assert "Which words of “a cat” carry the information" in text
    assert [w for w, _ in records[0].text_side.words()] == ["a", "cat"]
    assert any("M2IB's text side" in c.value for c in at.caption)
    assert [t["token"] for t in records[0].report()["text_side"]["tokens"]] == ["a", "cat"]  # in the JSON report
    assert "similarity" in " ".join(m.value for m in at.markdown if m.value.startswith("**Step"))
    # the other prompt's run in the replay and the result
    at.segmented_control(key="ps_prompt_shown").set_value(1)
    at = clean(at.run())
    assert at.session_state["ps_run"] is records[1]
    assert "“a dog”" in " ".join(c.value for c in at.caption)


def test_m2ib_as_its_authors_run_it_from_the_bottleneck_choice(open_page, models) -> None:
    """A CLIP model offers M2IB (the `m2ib` preset: standard-normal prior, β·k 0.1, the last forward pass); its run
    estimates no statistics and says so; a classifier does not offer it."""
    at = open_page("per_sample")
    assert "m2ib" not in at.radio(key="ps_bottleneck").options  # the offline classifier
    at = added(at, models)
    at = clean(at.radio(key="ps_bottleneck").set_value("m2ib").run())
    assert at.select_slider(key="psm_beta_similarity").value == 0.1
    at.text_area(key=PROMPTS_KEY).set_value("a cat")
    at.number_input(key="psm_steps").set_value(2)
    at.number_input(key="psm_batch").set_value(2)
    at = clean(at.button(key="ps_run_button").click().run())
    record = at.session_state["ps_run"]
    s = record.result.settings
    assert (s.prior, s.read_point, s.sigma, s.beta_k) == ("standard_normal", "last_step", 0.0, 0.1)
    assert "standard-normal prior" in record.stats_description
    assert [w for w, _ in record.text_side.words()] == ["a", "cat"]
    assert record.report()["method"].startswith("M2IB") and record.file_stem.startswith("m2ib_")
    at = clean(at.radio(key="ps_bottleneck").set_value("per_sample").run())


def test_an_empty_prompt_box_says_so_and_keeps_the_last_result(open_page, models) -> None:
    at = added(open_page("per_sample"), models)
    at.text_area(key=PROMPTS_KEY).set_value("a ruler")
    at.number_input(key="ps_steps").set_value(1)
    at.number_input(key="ps_batch").set_value(2)
    at = clean(at.button(key="ps_run_button").click().run())
    before = at.session_state["ps_run"]
    at.text_area(key=PROMPTS_KEY).set_value("  \n \n")
    at = at.button(key="ps_run_button").click().run()
    assert_clean(at)
    assert "Type at least one text prompt" in " ".join(e.value for e in at.error)
    assert at.session_state["ps_run"] is before


def test_a_thousand_prompts_are_refused_before_any_run_within_the_budget(open_page, models, lock_waits) -> None:
    """1,000 CLIP prompts took 234 s on a tiny model: in an app served to others (AppTest listens on no address) the
    box's runs are counted first and refused above the budget in one sentence; the last result stays."""
    at = added(open_page("per_sample"), models)
    at.text_area(key=PROMPTS_KEY).set_value("a ruler")
    at.number_input(key="ps_steps").set_value(1)
    at.number_input(key="ps_batch").set_value(2)
    at = clean(at.button(key="ps_run_button").click().run())
    turns = len(lock_waits)
    at.run()  # a rerun that asks for nothing takes the network this often (the image's prediction)
    before, plain, turns = at.session_state["ps_run"], len(lock_waits) - turns, len(lock_waits)
    at.text_area(key=PROMPTS_KEY).set_value("\n".join(f"a photo of thing {i}" for i in range(1000)))
    at.number_input(key="ps_steps").set_value(10)
    at.number_input(key="ps_batch").set_value(10)
    at = at.button(key="ps_run_button").click().run()
    assert_clean(at)
    (error,) = [e.value for e in at.error]
    # 1,000 runs × (10 steps × 10 copies × 2 + 1) passes, and as many for each prompt's words (M2IB's text side)
    assert error.startswith("These 1000 runs (one per prompt) would cost about 402,000 network passes (bottleneck "
                            "steps 201,000; the prompts' words 201,000), above this shared app's limit of 10,000 passes a "
                            "request, so it did not start: choose fewer steps, a smaller batch or fewer prompts.")
    assert "IBA_MAX_REQUEST_PASSES" in error
    assert at.session_state["ps_run"] is before and len(lock_waits) - turns == plain  # nothing ran


# ---- the Dataset page's prompt search ---------------------------------------------------------------


@pytest.fixture(scope="module")
def prompt_run(models) -> Path:
    """A folder run of the tiny CLIP over five random images with two prompts (the Per-Sample Bottleneck, quick)."""
    folder = models / "data" / "images"  # inside the models folder: a folder the app may read
    folder.mkdir(parents=True)
    rng = np.random.default_rng(5)
    for i in range(5):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(folder / f"img{i}.png")
    network = load_network(f"clip:{models / 'src-clip'}")
    root, items = list_images(folder)
    out = models / "data" / "run"
    method = get_method("iba_10", beta_k=0.1, steps=2, batch=2, precision="fp32", stats_samples=16)
    run_folder(network, items, [method], out, FolderSettings(prompts=("a cat", "a dog")), root=root)
    finish_run(out)
    return out


def open_run(at: AppTest, run: Path) -> AppTest:
    at.text_input(key="ds_path").set_value(str(run))
    return clean(at.button(key="ds_open_button").click().run())


def test_the_dataset_page_ranks_the_runs_images_for_a_prompt(open_page, prompt_run) -> None:
    import pandas as pd

    at = open_run(open_page("dataset"), prompt_run)
    assert "Search the run for a prompt" in [h.value for h in at.subheader]
    assert at.selectbox(key="ds_prompt").options == ["a cat", "a dog"]
    at = clean(at.selectbox(key="ds_prompt").set_value("a dog").run())
    table = pd.read_parquet(prompt_run / "results.parquet")
    dog = table[table["prompt"] == "a dog"].sort_values("total_bits", ascending=False)
    numbers = [c.value for c in at.caption if c.value[:2] in {f"{i}." for i in range(1, 6)}]
    assert len(numbers) == 5
    # in rank order, with each image's bits and similarity (Markdown-escaped by the page)
    for i, (text, (_, row)) in enumerate(zip(numbers, dog.iterrows()), start=1):
        text = text.replace("\\", "")
        assert text.startswith(f"{i}. {row['image']} · ")
        assert f"{row['total_bits']:,.1f} bits" in text and f"similarity {row['p_target']:.3f}" in text


def test_a_prompt_the_run_lacks_says_how_to_add_it(open_page, prompt_run) -> None:
    at = open_run(open_page("dataset"), prompt_run)
    at = clean(at.text_input(key="ds_prompt_typed").set_value("a watermark").run())
    warning = " ".join(w.value for w in at.warning).replace("\\", "")
    assert "holds no maps for the prompt “a watermark”" in warning and "a cat, a dog" in warning
    command = " ".join(c.value for c in at.code)
    # the run folder relative to the allowed folder holding it (the models folder), never the server's path (#40)
    relative = f"{prompt_run.parents[1].name}/{prompt_run.parent.name}/{prompt_run.name}"
    assert "--prompt 'a watermark'" in command and f"--out {relative} " in command and str(prompt_run) not in command


def test_the_start_form_runs_a_clip_folder_with_prompts(open_page, models, prompt_run) -> None:
    from iba_core.app.folder_job import current_job
    from iba_core.runs import open_run as read_run

    at = added(open_page("dataset"), models)
    at.text_input(key="ds_source").set_value(str(models / "data" / "images"))
    at.text_input(key="ds_out").set_value(str(models / "data" / "page-run"))
    at.multiselect(key="ds_methods").set_value(["gradient"])
    at = at.button(key="ds_start_button").click().run()  # an empty prompt box: said, nothing starts
    assert_clean(at)
    assert "Type at least one text prompt" in " ".join(e.value for e in at.error)
    assert current_job() is None or current_job().run_dir != models / "data" / "page-run"
    at.text_area(key="ds_prompts").set_value("a cat\na ruler")
    at = clean(at.button(key="ds_start_button").click().run())
    job = current_job()
    assert job is not None and job.wait(120) and job.error is None
    run = read_run(models / "data" / "page-run")
    assert run.info["prompts"] == ["a cat", "a ruler"] and len(run.table) == 5 * 2
    assert set(run.table["prompt"]) == {"a cat", "a ruler"} and run.table["error"].isna().all()
