"""Run files are data, checked when read back (issue #40, item 2): a run.json with a 6000-pixel crop, `"methods": []`,
a list where a mapping belongs, text where a number belongs, brackets nested 100,000 deep, a list at the top, a file
cut short or too large, and a part whose column holds another type. Each is one sentence naming the field through
the library (`open_run`), the CLI (`report`: exit 1, no traceback) and the Dataset page (no server path; the run
shown before stays), and nothing is allocated for the 6000-pixel crop."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tracemalloc
from pathlib import Path
from typing import Callable

import pytest

from bad_input_helpers import APP, PAGE_TIMEOUT, assert_one_sentence, cli_error, run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import make_shortcut_run  # noqa: E402

from iba_core.errors import UserError  # noqa: E402
from iba_core.runs import run_file  # noqa: E402
from iba_core.runs.store import RunFolderError  # noqa: E402
from iba_core.runs.tables import open_run  # noqa: E402

#: Peak Python/numpy memory (tracemalloc) allowed while refusing a run: an image cropped to 6000 × 6000 px alone
#: would take 108 MB (the issue measured 4.5 GB for the report).
PEAK_BYTES = 32 * 2**20


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished folder run of the tiny CNN (six images, the Per-Sample Bottleneck)."""
    root = tmp_path_factory.mktemp("bad_run_files")
    run_dir, _ = make_shortcut_run(root / "data_root", per_class=3)
    return run_dir


def edited(run: Path, dest: Path, change: Callable[[dict], object] | None = None, text: str | None = None) -> Path:
    """A copy of `run` in `dest` with run.json changed in place by `change`, or replaced by `text`."""
    shutil.copytree(run, dest)
    if text is None:
        info = json.loads((dest / "run.json").read_text())
        change(info)
        text = json.dumps(info)
    (dest / "run.json").write_text(text, encoding="utf-8")
    return dest


def _set(path: str, value) -> Callable[[dict], None]:
    """A change that sets run.json's field at `path` ("methods.iba_10.settings.steps") to `value`."""
    def change(info: dict) -> None:
        *parents, last = path.split(".")
        for key in parents:
            info = info[key]
        info[last] = value
    return change


DEEP = 100_000
#: (case, the change, a field the sentence names, words it holds).
CASES = [
    ("crop 6000", dict(change=_set("preprocess.crop", 6000)), "preprocess.crop", "6000"),
    ("resize 10**30", dict(change=_set("preprocess.resize", 10**30)), "preprocess.resize", "2,048"),
    ("methods []", dict(change=_set("methods", [])), "run.json's methods", "is a list"),
    ("a list for a mapping", dict(change=_set("settings", [1, 2])), "run.json's settings", "is a list"),
    ("a method a list", dict(change=_set("methods.iba_10", ["x"])), "methods.iba_10", "a mapping"),
    ("text for a number", dict(change=_set("methods.iba_10.settings.steps", "ten")), "methods.iba_10.settings",
     "steps"),
    ("text for the crop", dict(change=_set("preprocess.crop", "224")), "preprocess.crop", "text"),
    ("β·k 1e300", dict(change=_set("methods.iba_10.settings.beta_k", 1e300)), "methods.iba_10.settings", "β·k"),
    ("a number for the source", dict(change=_set("source", 5)), "run.json's source", "5"),
    ("layers a number", dict(change=_set("methods.iba_10.layers", 5)), "methods.iba_10.layers", "5"),
    ("deeply nested settings", dict(change=_set("methods.iba_10.settings.seed", json.loads("[" * 50 + "]" * 50))),
     "methods.iba_10.settings.seed", "a list"),
    ("brackets 100,000 deep", dict(text='{"format": 1, "methods": ' + "[" * DEEP + "]" * DEEP + "}"), "run.json",
     "nests its brackets"),
    ("a list at the top", dict(text="[1, 2, 3]"), "run.json", "holds a list"),
    ("another format", dict(change=_set("format", "2")), "run.json's format", "format 1"),
    ("cut short", dict(text='{"format": 1, "network": "card:tiny", "methods": {"iba_'), "run.json", "cut short"),
    ("a prompt too long", dict(change=_set("prompts", ["x" * 5000])), "prompts[0]", "characters"),
    ("a thumbnail of 10,000 px", dict(change=_set("settings.thumbnail", 10_000)), "settings.thumbnail", "28"),
    ("a metric protocol step of text", dict(change=_set("settings.yardsticks", {
        "metrics": ["insertion"], "seed": 0, "protocol": {"name": "rise", "step": "224", "deletion_baseline": "zeros",
                                                         "blur_kernel": 11, "blur_sigma": 5.0}})),
     "settings.yardsticks.protocol", "step"),
]


def _refusal(run: Path, tmp_path: Path, case: dict) -> tuple[Path, RunFolderError]:
    bad = edited(run, tmp_path / "bad", **case)
    with pytest.raises(RunFolderError) as caught:
        open_run(bad)
    return bad, caught.value


@pytest.mark.parametrize("name,case,field,words", CASES, ids=[c[0] for c in CASES])
def test_the_library_refuses_a_bad_run_file_in_one_sentence(run, tmp_path, name, case, field, words) -> None:
    bad, err = _refusal(run, tmp_path, case)
    assert isinstance(err, UserError)
    assert field in err.message and words in err.message, err.message
    assert_one_sentence(err.message)
    assert str(tmp_path) not in err.message  # the sentence names run.json, not the server's path to it


CLI_CASES = CASES[:8] + CASES[11:15]  # the crop, the types, the nesting, the top level, the cut-short file


@pytest.mark.parametrize("name,case,field,words", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_report_refuses_a_bad_run_file_with_the_user_error_code(run, tmp_path, name, case, field, words) -> None:
    bad = edited(run, tmp_path / "bad", **case)
    result = run_cli(["report", bad, "--out", tmp_path / "report.html"])
    assert result.code == 1, (result.code, result.err[-500:])  # a user's mistake, not an internal error (70)
    assert "Traceback" not in result.err
    message = cli_error(result)
    assert field in message and words in message, message
    assert_one_sentence(message)
    assert not (tmp_path / "report.html").exists()


def test_a_6000_pixel_crop_is_refused_before_any_image_is_made(run, tmp_path, monkeypatch) -> None:
    """The issue's case: `report` of a run whose preprocess says crop 6000 used 4.5 GB; now it is refused while
    run.json is read, before any Preprocess (the resize and crop of an image) exists."""
    import iba_core.networks.spec as spec

    bad = edited(run, tmp_path / "bad", _set("preprocess.crop", 6000))
    made = []
    real_init = spec.Preprocess.__init__
    monkeypatch.setattr(spec.Preprocess, "__init__", lambda self, *a, **k: (made.append(k), real_init(self, *a, **k)))
    tracemalloc.start()
    try:
        result = run_cli(["report", bad, "--out", tmp_path / "report.html"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.code == 1 and "preprocess.crop is 6000" in cli_error(result)
    assert not made, "an image's crop was prepared from the refused run file"
    assert peak < PEAK_BYTES, f"refusing the run took {peak / 2**20:.0f} MiB"


def test_a_run_file_over_the_size_cap_is_refused_unparsed(run, tmp_path, monkeypatch) -> None:
    bad = edited(run, tmp_path / "bad", _set("network", "card:tiny"))
    monkeypatch.setattr(run_file, "MAX_RUN_FILE_BYTES", 100)  # the real cap is 16 MiB; the file is ~0.9 kB
    monkeypatch.setattr(run_file.json, "loads", lambda *a, **k: pytest.fail("an oversized run.json was parsed"))
    with pytest.raises(RunFolderError, match=r"run\.json is .* MiB; a run writes at most"):
        open_run(bad)


def _rewrite_part(run_dir: Path, edit: Callable) -> str:
    """Rewrite the run's first part with `edit(table) -> table`, its checksum updated (as an editor would)."""
    import pyarrow.parquet as pq

    part = sorted((run_dir / "parts").glob("*.parquet"))[0]
    pq.write_table(edit(pq.read_table(part)), part)
    sums = run_dir / "parts" / f"{part.stem}.sha256"
    lines = [line for line in sums.read_text().splitlines() if not line.endswith(f"parts/{part.name}")]
    lines.append(f"{hashlib.sha256(part.read_bytes()).hexdigest()}  parts/{part.name}")
    sums.write_text("\n".join(lines) + "\n")
    return part.stem


def test_a_part_with_text_where_numbers_belong_is_left_out_and_named(run, tmp_path) -> None:
    import pyarrow as pa

    bad = edited(run, tmp_path / "bad", _set("network", "card:tiny"))

    def as_text(table):
        i = table.schema.get_field_index("total_bits")
        return table.set_column(i, "total_bits", pa.array(["many"] * table.num_rows))

    name = _rewrite_part(bad, as_text)
    opened = open_run(bad)  # opens with the intact rows: the part counts as damaged
    assert [d.part for d in opened.damage] == [name]
    assert "total_bits" in opened.missing and "numbers" in opened.missing
    assert opened.table["total_bits"].dtype == "float64"


def test_a_checksum_file_past_its_cap_is_not_read(run, tmp_path) -> None:
    """A part's checksum file is read within MAX_SUMS_BYTES: the same two lines repeated past it (which would
    otherwise check out) leave the part out as unreadable, never read whole."""
    from iba_core.runs.checks import MAX_SUMS_BYTES

    bad = edited(run, tmp_path / "bad", _set("network", "card:tiny"))
    sums = sorted((bad / "parts").glob("*.sha256"))[0]
    text = sums.read_text()
    sums.write_text(text * (MAX_SUMS_BYTES // len(text) + 2))
    opened = open_run(bad)
    assert [d.part for d in opened.damage] == [sums.stem] and "cannot be read" in opened.missing


def test_a_map_file_that_unpacks_past_the_bound_is_refused(run, monkeypatch) -> None:
    opened = open_run(run)
    row = opened.table.iloc[0]
    assert opened.heatmap(row).shape == (int(row["height"]), int(row["width"]))
    monkeypatch.setattr(run_file, "max_member_bytes", lambda: 100)
    with pytest.raises(RunFolderError, match="more than a run writes") as caught:
        opened.heatmap(row)
    assert str(run) not in caught.value.message


def test_the_dataset_page_says_the_sentence_without_a_path_and_keeps_the_run(run, tmp_path, monkeypatch) -> None:
    from streamlit.testing.v1 import AppTest

    root = run.parent
    bad = edited(run, root / "bad_crop", _set("preprocess.crop", 6000))
    monkeypatch.setenv("IBA_DATA_DIRS", str(root))
    try:
        at = AppTest.from_file(str(APP), default_timeout=PAGE_TIMEOUT).run()
        at.switch_page("pages/dataset.py").run()
        at.text_input(key="ds_path").input(str(run))
        at.button(key="ds_open_button").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        good = at.session_state["ds_run"]
        at.text_input(key="ds_path").input(str(bad))
        at.button(key="ds_open_button").click().run()
        assert not at.exception, [e.value for e in at.exception]
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and "preprocess.crop is 6000" in errors[0], errors
        assert_one_sentence(errors[0])
        assert str(root) not in errors[0] and "/" not in errors[0]  # no server path
        assert at.session_state["ds_run"].path == good.path  # the run shown before stays
    finally:
        shutil.rmtree(bad, ignore_errors=True)
