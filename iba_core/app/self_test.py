"""The Dataset page's planted-mark self-test (issue #42, item 2), with no Streamlit: the form's mark made and
checked (a built-in kind, or a PNG a visitor uploaded), the folders checked against the trust rules as a folder run's
are, the test's cost held to the app's budget, the test run (`selftest.self_test`), and what the page draws of it: the
model's reaction in figures, the methods' ranking table, an example pair of copies, and the paired view of the clean
and marked runs (`app.run_compare`).

    mark = form_mark("patch", "bottom-right", None, 1.0)
    result = run_self_test(network, "/data/val", "/data/selftest", mark, ["iba_10", "saliency"], 16,
                           trust=trust)                          # the library's SelfTest, written into the folder
    ranking_table(result)                                        # localisation ratio (1 = chance), AUROC, rank
"""
from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..budget import check_budget
from ..errors import UserError
from ..progress import ProgressFn
from ..runs.paired import Paired
from ..selftest.marks import KINDS, PLACES, PNG, Mark, make_mark
from ..selftest.scores import RATIO_FLOOR
from ..trust import Trust, check_server_path
from .folder_job import checked_methods, checked_image_folder, image_cost

if TYPE_CHECKING:
    import pandas as pd

    from ..selftest.selftest import SelfTest
    from .state import SharedModel

#: The marks the form offers: the built-in kinds, then an uploaded PNG.
MARK_CHOICES = (*KINDS, PNG)
#: The form's places (the library's words; "center" is "centre" spelt the other way).
PLACE_CHOICES = tuple(p for p in PLACES if p != "center")
#: The sample the form proposes: enough images for an AUROC, few enough for a CPU (cleared: every image).
DEFAULT_SAMPLE = 16
#: The runs of each image a self-test may make (`selftest.self_test`): clean and marked copies, for its own class and
#: for the class the mark pushes toward (that pair only where the model reacts, unknown before the test).
RUNS_PER_IMAGE = 4
#: The ranking table's columns.
RANKING_COLUMNS = ["rank", "method", "target", "images", "localisation_ratio", "best_ratio", "auroc", "share_clean",
                   "share_marked"]


def form_mark(kind: str, where: str | None, size: float | None, opacity: float, text: str = "",
              upload: tuple[str, bytes] | None = None) -> Mark:
    """The `Mark` of the form: a built-in kind (`selftest.marks.make_mark`, its checks and defaults: `size` None is
    the kind's), or an uploaded PNG (name, bytes), checked as the command line checks a PNG file. A border runs round
    the whole crop: its place is not asked."""
    where = None if kind == "border" else where
    if kind != PNG:
        if kind not in KINDS:
            raise UserError(f"The mark {kind!r} is not one of {', '.join(MARK_CHOICES)}.")
        return make_mark(kind, where, size, opacity, text=text or "© sample")
    if upload is None:
        raise UserError("Upload the mark's PNG (transparent where the mark is not), or choose a built-in mark.")
    name, data = upload
    with tempfile.TemporaryDirectory() as folder:  # the library reads and checks a PNG from a file
        path = Path(folder) / "mark.png"
        path.write_bytes(data)
        mark = make_mark(path, where, size, opacity)
    return replace(mark, png=Path(name).name or "mark.png")


def selftest_folder(text: str, trust: Trust) -> Path:
    """The self-test's folder typed on the server (created by the test), checked against the trust rules as a run
    folder is."""
    if not (text or "").strip():
        raise UserError("Type the folder on the server the self-test writes its copies, runs and results to.")
    return check_server_path(Path(text.strip()).expanduser(), trust, what="self-test folder", folder=True)


def run_self_test(network, folder: str, out: str, mark: Mark, method_keys: Sequence[str], sample: int | None, *,
                  shared: "SharedModel", trust: Trust, budget: int | None = None,
                  progress: ProgressFn | None = None) -> "SelfTest":
    """The self-test of `network` (held by the caller: `shared.busy()`) on the images of `folder` (all, or a seeded
    `sample`), both folders checked against `trust`; its cost (every method's map on each image, four times: clean
    and marked, for the own class and the pushed one) held to `budget` before anything runs. Resumes a test already
    in `out`."""
    from ..selftest.selftest import self_test

    source, target = checked_image_folder(folder, trust), selftest_folder(out, trust)
    if sample is not None and sample < 1:
        raise UserError(f"The sample must be at least 1 image (you gave {sample}).")
    methods = checked_methods(shared, method_keys, None)
    from ..runs import list_images

    _, items = list_images(source, class_index=network.class_index, categories=network.categories)
    images = min(len(items), sample or len(items))
    # four runs an image: clean and marked, for its own class and for the class the mark pushes toward, which is
    # known only once the copies are made, so it is counted in advance
    check_budget(image_cost(network, methods, ()).times(RUNS_PER_IMAGE * max(images, 1)), budget,
                 f"A self-test of {images} images ({RUNS_PER_IMAGE} runs of each: clean and marked, for its own class "
                 "and for the class the mark may push toward)", "choose a smaller sample or fewer methods")
    return self_test(network, source, mark, methods, target, sample=sample, progress=progress)


def reaction_figures(result: "SelfTest") -> list[tuple[str, str, str]]:
    """The model's reaction as (label, value, help) for a row of figures."""
    r = result.reaction
    floored = f" or more (from below {RATIO_FLOOR:g})" if r.toward_p_clean < RATIO_FLOOR else ""
    return [
        ("p(own class)", f"{r.p_own_clean:.3f} → {r.p_own_marked:.3f}",
         f"Mean over {r.images} images: each image's own class (its label, else the clean copy's top-1) on the "
         "clean copy → on the marked one."),
        ("Changed predictions", f"{r.changed_share:.0%}", "Share of images whose top-1 class differs on the marked "
         "copy" + (": " + ", ".join(f"{n} {c}" for n, c in r.changed_to.items()) if r.changed_to else ".")),
        (f"p({r.toward_name})", f"{r.toward_p_clean:.3f} → {r.toward_p_marked:.3f}",
         "The class whose mean probability rises most on the marked copies (a watermark can tie a network to one "
         f"class): ×{r.toward_ratio:.3g}{floored}."),
    ]


def ranking_table(result: "SelfTest") -> "pd.DataFrame":
    """Per method and target: its rank (empty where the test cannot rank), the localisation ratio (1 = chance, at
    most `best_ratio`), the AUROC (0.5 = chance) and the mean share of map mass inside the mark on each copy."""
    import pandas as pd

    rows = [{"rank": s.rank, "method": s.name, "target": "own class" if s.target == "own" else
             f"{result.reaction.toward_name} (pushed toward)", "images": s.images,
             "localisation_ratio": s.localisation_ratio, "best_ratio": s.best_ratio, "auroc": s.auroc,
             "share_clean": s.share_clean, "share_marked": s.share_marked} for s in result.scores]
    table = pd.DataFrame(rows, columns=RANKING_COLUMNS).astype({"rank": "Int64"})
    return table.sort_values(["rank", "target", "method"], na_position="last", kind="stable").reset_index(drop=True)


def example_copies(result: "SelfTest", side: int = 192) -> tuple[bytes, bytes] | None:
    """The first image's clean and marked copies as PNGs (`side` px wide), or None without one (or where the copies
    cannot be read any more)."""
    from PIL import Image

    from ..render.overlays import png_bytes

    if result.images.empty:
        return None
    key = str(result.images["copy"].iloc[0])
    pictures = []
    for folder in (result.clean_dir, result.marked_dir):
        try:
            with Image.open(folder / key) as img:
                img = img.convert("RGB")
        except OSError:  # the test's folder changed since: no example, the rest of the results stand
            return None
        pictures.append(png_bytes(img.resize((side, max(1, round(side * img.height / img.width)))), optimize=False))
    return pictures[0], pictures[1]


def paired_choices(result: "SelfTest") -> list[tuple[str, str]]:
    """The (method, target) pairs the paired view can show, the best ranked first (then the scores' order)."""
    scored = [(s.method, s.target) for s in sorted(result.scores, key=lambda s: (s.rank is None, s.rank or 0))]
    return list(dict.fromkeys(scored))


def paired_label(result: "SelfTest", choice: tuple[str, str]) -> str:
    """A (method, target) pair in words: the method's name and the class its maps explain."""
    method, target = choice
    name = next((s.name for s in result.scores if s.method == method), method)
    return f"{name}, {'each image’s own class' if target == 'own' else result.reaction.toward_name}"


def paired_runs(result: "SelfTest", choice: tuple[str, str]) -> Paired:
    """The clean (A) and marked (B) runs of one method and target compared image by image (`SelfTest.paired`)."""
    return result.paired(*choice)
