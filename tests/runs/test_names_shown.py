"""Issue #40, item 4: a name is shown as written. A right-to-left override (U+202E) in a file name reversed the
numbers after it in the Dataset page's gallery ("5.7 bits · border 38 %" read "stib 7.5 · %83 redrob") and in
the folder report ("5.65 bits" read "56.5"); every name now sits in a bidi isolate and its invisible characters
are named beside it."""
from __future__ import annotations

import re

import pandas as pd

from iba_core import open_run
from iba_core.methods import get_method
from iba_core.render.text import ISOLATE_END, ISOLATE_START
from iba_core.runs import FolderSettings, finish_run, list_images, run_folder
from iba_core.trust import Trust
from run_fixtures import write_noise_images

RLO = "\u202e"


def assert_isolated(text: str, name: str) -> str:
    """The override of `name` lies inside an isolate that `text` closes; returns the text after that isolate."""
    start = text.index(ISOLATE_START + name)
    end = text.index(ISOLATE_END, start)
    assert start < text.index(RLO) < end  # the override acts inside the isolate only
    return text[end + 1:]


def test_a_gallery_caption_keeps_the_numbers_after_an_override_in_order():
    from iba_core.app.dataset_gallery import cell_caption

    row = pd.Series({"image": f"photo{RLO}gpj.png", "class_name": "tench", "target": 0, "correct": True,
                     "predicted_name": "tench", "total_bits": 5.7, "border_share": 0.38})
    caption = cell_caption(row, "Per-Sample (β·k 10)", bits=True)
    after = assert_isolated(caption, f"photo{RLO}gpj.png")
    assert "5.7 bits · border 38%" in after and RLO not in after
    assert "U+202E (right-to-left override)" in after  # what the invisible character is, said beside the name


def test_the_report_keeps_the_bits_after_an_override_in_order(tiny_net, tmp_path):
    from iba_core.app.dataset_report import report_html

    folder = tmp_path / "images"
    paths = write_noise_images(folder, 3)
    name = f"a{RLO}gnp.png"
    paths[0].rename(folder / name)
    root, items = list_images(folder, class_index=tiny_net.class_index)
    out = tmp_path / "run"
    method = get_method("iba_10", steps=2, batch=2, precision="fp32", stats_samples=16)
    run_folder(tiny_net, items, [method], out, FolderSettings(batch_images=3), root=root)
    finish_run(out)
    html = report_html(open_run(out), "iba_10", Trust.local()).decode("utf-8")
    assert html.count(name) >= 1 and html.count(name) == html.count(ISOLATE_START + name)  # always isolated
    # a cluster member's caption: the bits read in order after the isolate, the override named beside the name
    captions = re.findall(f"<figcaption>([^<]*{name}[^<]*)</figcaption>", html)
    assert captions
    for caption in captions:
        after = assert_isolated(caption, name)
        assert re.fullmatch(r" \[holds an invisible character: U\+202E \(right-to-left override\)\]"
                            r" · [0-9.]+(e[-+][0-9]+)? bits( · needs very few bits)?", after), after
