"""UI-independent app helpers (iba_core.app_support)."""
from __future__ import annotations

import ast
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from iba_core import app_support as sup
from iba_core.images import ImageError
from iba_core.models import WeightsUnavailableError


def test_default_stats_samples_reads_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(sup.STATS_SAMPLES_ENV, raising=False)
    assert sup.default_stats_samples() == 1000
    monkeypatch.setenv(sup.STATS_SAMPLES_ENV, "32")
    assert sup.default_stats_samples() == 32
    for bad in ("", "zero", "-5", "0", "1.5"):
        monkeypatch.setenv(sup.STATS_SAMPLES_ENV, bad)
        assert sup.default_stats_samples() == 1000


def test_beta_choices_are_log_spaced_and_include_the_paper_default() -> None:
    values = np.array(sup.BETA_K_CHOICES)
    assert values[0] == 0.01 and values[-1] == 1000.0 and sup.DEFAULT_BETA_K in values
    assert (np.diff(values) > 0).all()
    assert np.diff(np.log10(values)).max() < 0.5  # no gaps wider than a factor of ~3
    assert sup.DEFAULT_THRESHOLD in sup.THRESHOLD_CHOICES


def test_upload_input_refuses_too_large_and_corrupt_files() -> None:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (1, 2, 3)).save(buf, format="PNG")
    ok = sup.upload_input("x.png", buf.getvalue())
    assert ok.image.size == (40, 30) and ok.name == "x.png"
    assert ok.digest == sup.upload_input("y.png", buf.getvalue()).digest  # content, not name
    with pytest.raises(ImageError, match="limited to 1 MB"):
        sup.upload_input("big.png", bytes(2 * 1024 * 1024), max_mb=1)
    with pytest.raises(ImageError):
        sup.upload_input("bad.png", b"not an image")


def test_user_message_keeps_known_messages_and_wraps_others() -> None:
    assert sup.user_message(ImageError("The file is empty.")) == "The file is empty."
    assert sup.user_message(WeightsUnavailableError("Place the file here.")) == "Place the file here."
    msg = sup.user_message(RuntimeError("boom"))
    assert "RuntimeError" in msg and "previous results are kept" in msg


def test_format_probability() -> None:
    assert sup.format_probability(0.35544) == "35.5 %"
    assert sup.format_probability(0.0000123) == "0.0012 %"


class _FakeLoaded:
    categories = ["tabby", "tiger cat", "Egyptian cat", "tiger"]

    def class_index(self, target):
        from iba_core.models import LoadedModel

        return LoadedModel.class_index(self, target)


def test_resolve_class_accepts_index_name_and_unique_part() -> None:
    loaded = _FakeLoaded()
    assert sup.resolve_class(loaded, 2) == 2
    assert sup.resolve_class(loaded, "3") == 3
    assert sup.resolve_class(loaded, "TIGER") == 3  # exact name wins over partial matches
    assert sup.resolve_class(loaded, "egypt") == 2
    with pytest.raises(ValueError, match="No ImageNet class"):
        sup.resolve_class(loaded, "cat")  # ambiguous: three classes contain it
    with pytest.raises(ValueError):
        sup.resolve_class(loaded, "zebra")


def test_iba_core_never_imports_streamlit() -> None:
    for path in (Path(__file__).resolve().parents[1] / "iba_core").glob("*.py"):
        tree = ast.parse(path.read_text())
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not any(n.split(".")[0] == "streamlit" for n in names), path.name


def test_choose_stats_prefers_folder_then_best_cached(tmp_path, monkeypatch) -> None:
    from iba_core.models import load_model

    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    loaded = load_model("efficientnet_lite0", weights="random")
    with pytest.raises(FileNotFoundError, match="not found"):
        sup.choose_stats(loaded, "stem", folder=tmp_path / "missing")

    calls = []
    fresh = sup.choose_stats(loaded, "stem", n=4, progress=lambda d, t: calls.append((d, t)))
    assert fresh.n == 4 and calls[-1] == (4, 4)
    assert "Cached" in sup.stats_status(loaded, "stem") or sup.default_stats_samples() > 4

    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(3):
        Image.new("RGB", (64, 48), (40 * i, 90, 200)).save(folder / f"{i}.png")
    from_folder = sup.choose_stats(loaded, "stem", folder=str(folder), n=10)
    assert from_folder.n == 3 and "folder" in from_folder.source

    again = sup.choose_stats(loaded, "stem", n=2)  # cached ones with ≥ 2 samples: the largest wins
    assert again.n == 4 and again.source == fresh.source


def test_app_threads_leave_a_core_for_the_server(monkeypatch) -> None:
    monkeypatch.delenv(sup.THREADS_ENV, raising=False)
    assert sup.app_threads() >= 1
    monkeypatch.setenv(sup.THREADS_ENV, "3")
    assert sup.app_threads() == 3
    monkeypatch.setenv(sup.THREADS_ENV, "lots")
    assert sup.app_threads() >= 1


def test_shared_model_busy_holds_the_lock_and_restores_threads(monkeypatch) -> None:
    import threading

    import torch

    monkeypatch.setenv(sup.THREADS_ENV, "1")
    shared = sup.SharedModel(loaded=object())  # the lock logic does not look at the model
    before = torch.get_num_threads()
    other_got_it = []
    with shared.busy() as loaded:
        assert loaded is shared.loaded and torch.get_num_threads() == 1
        with shared.busy():  # re-entrant for helpers that lock too
            pass
        t = threading.Thread(target=lambda: other_got_it.append(shared.lock.acquire(timeout=0.1)))
        t.start()
        t.join()
    assert other_got_it == [False]  # another session had to wait
    assert torch.get_num_threads() == before
