"""iba_core.errors: one error type that speaks to each front end, the sentence users see, range checks.

Every library message that used to name a CLI flag is triggered here: the CLI's text (message + cli_hint) keeps
the flag, the app's text (message + app_hint) has no `--flag` and no `python -m`. A scan of iba_core's sources
keeps flags out of every other message.
"""
from __future__ import annotations

import argparse
import ast
import math
import pickle
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from iba_core.errors import USER_ERRORS, MissingFileError, UserError, check_range, internal_message, user_message
from iba_core.images import ImageError
from iba_core.networks import UnknownModelError, WeightsUnavailableError

ROOT = Path(__file__).resolve().parents[1]
#: What a command-line instruction looks like in a message.
CLI_WORDS = re.compile(r"python -m iba_core|(?<![\w-])--[a-z][\w-]*")


def _user_error_types() -> list[type]:
    """UserError's subclasses, the modules that define them imported first."""
    import importlib

    for module in ("iba_core.images", "iba_core.labels", "iba_core.trust", "iba_core.methods", "iba_core.runs.store",
                   "iba_core.readout.config", "iba_core.networks.cards", "iba_core.networks.model_folders",
                   "iba_core.networks.state_files", "iba_core.networks.hub", "iba_core.networks.model_size"):
        importlib.import_module(module)
    found, todo = [], [UserError]
    while todo:
        found.append(kind := todo.pop())
        todo.extend(kind.__subclasses__())
    assert len(found) > 10  # the scan saw the subclasses (ImageError, ModelCardError, …)
    return found


def _both(err: BaseException) -> tuple[str, str]:
    return user_message(err, "cli"), user_message(err, "app")


def _assert_front_ends(err: BaseException, flag: str) -> tuple[str, str]:
    """The CLI's text names `flag`; the app's has no command-line words; both start with the same message."""
    assert isinstance(err, UserError), type(err)
    cli, app = _both(err)
    assert flag in cli, cli
    assert not CLI_WORDS.search(app), app
    assert not CLI_WORDS.search(err.message), err.message  # the shared part names no front end
    assert cli.startswith(err.message) and app.startswith(err.message)
    assert err.app_hint and app != err.message  # the app says what to do in its own words
    return cli, app


# ---- the error type and the sentence ------------------------------------------------------------


def test_a_mistake_keeps_its_sentence_and_anything_else_is_an_internal_error() -> None:
    assert user_message(ImageError("The file is empty."), "app") == "The file is empty."
    assert user_message(WeightsUnavailableError("Place the file here."), "cli") == "Place the file here."
    assert user_message(MissingFileError("No such folder: /x."), "cli") == "No such folder: /x."
    # A bare ValueError (or FileNotFoundError, RuntimeError) is a bug: never shown as the user's mistake.
    for bug in (ValueError("Expected one image shaped (1, 3, H, W)."), FileNotFoundError("/tmp/x.npz"),
                RuntimeError("boom")):
        msg = user_message(bug, "app", log_place="the log at /srv/app.log")
        assert msg.startswith("Internal error in IBA Explorer") and type(bug).__name__ in msg, msg
        assert "not a mistake of yours" in msg and msg.endswith("the log at /srv/app.log.")
        assert str(bug) not in msg  # the bug's own text goes to the log, not to a visitor
    assert USER_ERRORS == (UserError,)
    assert isinstance(MissingFileError("x"), FileNotFoundError)  # `except FileNotFoundError` still catches it
    assert "reference 1a2b" in internal_message(ValueError(), "the log", "1a2b")
    with pytest.raises(ValueError, match="front_end"):
        user_message(ValueError("x"), "web")


def test_each_front_end_gets_its_own_hint() -> None:
    err = UserError("The file is missing.", cli_hint="Pass --file F.", app_hint="Upload it.")
    assert user_message(err, "cli") == "The file is missing. Pass --file F."
    assert user_message(err, "app") == "The file is missing. Upload it."
    assert str(err) == "The file is missing."  # no front end's words in the bare error
    assert user_message(UserError("Only a message."), "app") == "Only a message."


def test_user_error_is_no_value_error_and_the_network_errors_keep_their_types() -> None:
    # a library's ValueError is a bug unless a parser turned it into a UserError: an `except ValueError` can
    # never catch a user's mistake, and an `except UserError` never a bug
    assert not issubclass(UserError, ValueError) and not isinstance(UserError("x"), ValueError)
    assert not any(issubclass(kind, ValueError) for kind in _user_error_types())
    weights = WeightsUnavailableError("w", cli_hint="c", app_hint="a")
    assert isinstance(weights, RuntimeError) and isinstance(weights, UserError)
    unknown = UnknownModelError("No layer 'x'.")
    assert isinstance(unknown, KeyError) and str(unknown) == "No layer 'x'."  # not KeyError's quoted form
    back = pickle.loads(pickle.dumps(weights))
    assert type(back) is WeightsUnavailableError and (back.message, back.cli_hint, back.app_hint) == ("w", "c", "a")


@pytest.mark.parametrize("value, shown", [(1e300, "1e300"), (math.nan, "nan"), (math.inf, "inf"), (-1.0, "-1"),
                                          (1e-7, "1e-7")])
def test_check_range_names_the_range_and_the_value(value, shown) -> None:
    with pytest.raises(UserError) as err:
        check_range("β·k", value, 1e-6, 1e6)
    assert str(err.value) == f"β·k must be between 1e-6 and 1e6 (you gave {shown})."


def test_a_long_path_in_a_message_keeps_its_end_and_other_text_its_beginning() -> None:
    from iba_core.trust import SHOWN_CHARS, shown

    folder = Path("/srv/lab/shared/projects/dermatology-2026/experiments/run-0412/checkpoints/last-good-weights")
    cut = shown(folder)
    assert len(cut) == SHOWN_CHARS and cut.startswith("/srv/lab/") and "…" in cut
    assert cut.endswith("checkpoints/last-good-weights")  # the folder the user typed is named
    assert shown(str(folder)) == cut and shown(r"C:\Users\ana" + "\\x" * 60 + r"\model.pth").endswith(r"\model.pth")
    sentence = "the weights do not fit: " + "conv1.weight / conv2.weight " * 5
    assert shown(sentence) == sentence[: SHOWN_CHARS - 1].rstrip() + "…"
    assert shown("short/path") == "short/path" and shown(folder, 200) == str(folder)


def test_check_range_refuses_other_types_and_keeps_good_values() -> None:
    assert check_range("β·k", 10, 1e-6, 1e6) == 10.0
    assert check_range("steps", 3, 0, 10, integer=True) == 3
    for bad in ("ten", True, None):
        with pytest.raises(UserError, match="must be a number between"):
            check_range("β·k", bad, 1e-6, 1e6)
    with pytest.raises(UserError, match="must be a whole number between 0 and 10"):
        check_range("steps", 2.5, 0, 10, integer=True)


def test_cli_prints_the_message_with_the_cli_hint(capsys) -> None:
    from iba_core.cli.common import EXIT_FAILED, run_command

    def fail(args) -> int:
        raise UserError("Something is missing.", cli_hint="Pass --thing X.", app_hint="Use the menu.")

    assert run_command(argparse.Namespace(func=fail)) == EXIT_FAILED
    assert capsys.readouterr().err.strip() == "error: Something is missing. Pass --thing X."


def test_cli_reports_a_bug_as_an_internal_error_with_its_traceback(capsys) -> None:
    from iba_core.cli.common import EXIT_INTERNAL, run_command

    def bug(args) -> int:
        raise ValueError("shapes (3,) and (4,) do not align")

    assert run_command(argparse.Namespace(func=bug)) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback" in err and "shapes (3,) and (4,) do not align" in err  # the details, for a bug report
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: Internal error in IBA Explorer (ValueError)") and "traceback printed above" in last


def test_cli_main_tells_a_bug_in_the_library_from_a_mistake(monkeypatch, capsys) -> None:
    """Through the real entry point: a ValueError raised inside the library (here while `models` lists the
    weights) is an internal error with its traceback and exit status 70; a mistake is its one line, exit 1."""
    import iba_core.networks as networks
    from iba_core.cli import main

    assert main(["models", "--weights", "/no/such/folder/w.pth"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "error: The --weights file /no/such/folder/w.pth was not found; please check the path."

    def broken(spec):
        raise ValueError("weights table out of step")

    monkeypatch.setattr(networks, "weights_status", broken)
    assert main(["models"]) == 70
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "in broken" in err and "weights table out of step" in err
    assert err.strip().splitlines()[-1].startswith("error: Internal error in IBA Explorer (ValueError)")


# ---- each site that named a CLI flag ------------------------------------------------------------


def test_missing_weights(monkeypatch) -> None:
    from iba_core.networks import get_spec, weights

    monkeypatch.setattr(weights, "find_weights", lambda spec, weights_file=None: None)
    monkeypatch.setattr(weights, "_reachable", lambda url, timeout=3.0: False)
    with pytest.raises(WeightsUnavailableError) as err:
        weights.load_state_dict(get_spec("resnet50"), None)
    cli, app = _assert_front_ends(err.value, "--weights")
    for text in (cli, app):
        assert "resnet50-0676ba61.pth" in text and "ResNet-50" in text and "EfficientNet-Lite0" in text
    assert "IBA_WEIGHTS_DIR" in cli and "Network menu" in app and "'resnet50'" not in app


def test_inactive_units_without_activity(tiny_net, tiny_stats) -> None:
    from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

    assert tiny_stats.active is None
    iba = PerSampleBottleneck.from_split(tiny_net.prefix(), tiny_net.suffix(), tiny_stats,
                                         BottleneckSettings(inactive_threshold=0.01, precision="fp32"))
    with pytest.raises(UserError) as err:
        iba.attribute(torch.zeros(1, 3, 8, 8), target=0)
    cli, app = _assert_front_ends(err.value, "--refresh")
    assert "python -m iba_core stats" in cli and "Feature statistics" in app


def _network(key: str, title: str):
    """A stand-in with what the readout's checks read: key, title, weights id and layers."""
    return SimpleNamespace(key=key, weights_id="w", spec=SimpleNamespace(title=title, layers=("block3_2",)))


def test_no_readout_checkpoint(monkeypatch) -> None:
    import iba_core.readout as readout
    from iba_core.readout.checkpoints import readout_attribute

    monkeypatch.setattr(readout.checkpoints, "default_checkpoint", lambda key: None)
    with pytest.raises(readout.ReadoutCheckpointError) as err:
        readout_attribute(_network("vgg16", "VGG-16"), None, torch.zeros(1, 3, 8, 8))
    cli, app = _assert_front_ends(err.value, "--readout CKPT")
    assert "train-readout --model vgg16" in cli and "VGG-16" in app and "vgg16" not in app
    assert "Compare page" in app


def test_readout_method_without_checkpoint(monkeypatch, offline_model) -> None:
    import iba_core.readout as readout
    from iba_core.methods import get_method

    monkeypatch.setattr(readout, "default_checkpoint", lambda key: None)
    method = get_method("readout")
    reason = method.available_for(offline_model)
    assert reason and not CLI_WORDS.search(reason)  # the reason lists show it in both front ends
    with pytest.raises(readout.ReadoutCheckpointError) as err:
        method.attribute(offline_model, torch.zeros(1, 3, 224, 224), 0)
    _assert_front_ends(err.value, "train-readout --model efficientnet_lite0")


def test_readout_checkpoint_of_another_network() -> None:
    from iba_core.readout import ReadoutCheckpointError, ReadoutConfig, check_compatible

    config = ReadoutConfig(model="resnet50", weights_id="w", layer="block3_2", reads=("block3_2",),
                           feature_shape=(4, 8, 8), read_channels=(4,))
    with pytest.raises(ReadoutCheckpointError) as err:
        check_compatible(config, _network("efficientnet_lite0", "EfficientNet-Lite0"))
    cli, app = _assert_front_ends(err.value, "--model efficientnet_lite0")
    # titles where the error is raised, not registry keys replaced afterwards
    assert "trained for the network ResNet-50" in err.value.message and "EfficientNet-Lite0" in err.value.message
    assert "'resnet50'" not in app and "efficientnet_lite0" not in app


def _image_files(root: Path, folders: list[str]) -> list[Path]:
    files = []
    for name in folders:
        (root / name).mkdir(parents=True)
        files.append(root / name / "a.png")
        files[-1].write_bytes(b"")
    return files


def test_wordnet_folders_without_a_class_map(tmp_path) -> None:
    from iba_core.labels import DataError, folder_labels

    files = _image_files(tmp_path, ["n01484850", "n01491361"])  # ImageNet's sharks: not in this class list
    with pytest.raises(DataError) as err:
        folder_labels(tmp_path, files, ["tench", "goldfish", "shark", "ray", "hen"])
    cli, app = _assert_front_ends(err.value, "--class-map")
    assert "--labels top1" in cli and "0…4" in app


def test_class_folder_of_no_class(tmp_path) -> None:
    from iba_core.labels import DataError, folder_labels

    files = _image_files(tmp_path, ["tench", "zebra crossing"])
    with pytest.raises(DataError) as err:
        folder_labels(tmp_path, files, ["tench", "goldfish", "shark"], mode="folders")
    cli, app = _assert_front_ends(err.value, "--labels top1")
    assert "'zebra crossing'" in app


def test_bbox_metric_without_boxes() -> None:
    from iba_core.metrics import registry

    with pytest.raises(UserError) as err:
        registry.get("bbox").check(SimpleNamespace(boxes=None))  # the registry's check, before any slow work
    _, app = _assert_front_ends(err.value, "--boxes DIR")
    assert "Bounding box" in app


def test_pickled_whole_model(tmp_path) -> None:
    from iba_core.networks import UnsafeWeightsError
    from iba_core.networks.state_files import read_weights

    path = tmp_path / "whole.pth"
    torch.save(torch.nn.Linear(2, 2), path)
    with pytest.raises(UnsafeWeightsError) as err:
        read_weights(path)
    _, app = _assert_front_ends(err.value, "--trust-pickle")
    assert "state_dict" in app


def test_card_without_arch(tmp_path) -> None:
    from iba_core.networks import ModelCardError, load_network

    (tmp_path / "classes.txt").write_text("a\nb\n")
    torch.save(torch.nn.Linear(2, 2).state_dict(), tmp_path / "state.pth")  # weights, but nothing to put them in
    card = tmp_path / "bare.toml"
    card.write_text('weights = "state.pth"\nclasses = "classes.txt"\n')
    with pytest.raises(ModelCardError) as err:
        load_network(card)
    cli, app = _both(err.value)
    assert "--trust-pickle" in cli and not CLI_WORDS.search(app)  # the app never loads pickles: no hint there


# ---- no flags anywhere else -----------------------------------------------------------------------


def _strings(node: ast.AST) -> list[str]:
    """The text of the string literals (f-strings' fixed parts included) under `node`."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _error_calls(tree: ast.AST) -> list[ast.Call]:
    """Calls that make an error: what `raise` raises, and `return SomethingError(...)` in error factories."""
    calls = []
    for node in ast.walk(tree):
        value = node.exc if isinstance(node, ast.Raise) else node.value if isinstance(node, ast.Return) else None
        if isinstance(value, ast.Call):
            name = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
            if name.endswith("Error") or isinstance(node, ast.Raise):
                calls.append(value)
    return calls


def test_no_library_message_names_a_cli_flag_outside_its_cli_hint() -> None:
    """Every error made in iba_core outside cli/: flags and commands only in a `cli_hint=` argument."""
    offenders = []
    files = [p for p in (ROOT / "iba_core").rglob("*.py") if "cli" not in p.relative_to(ROOT / "iba_core").parts]
    assert len(files) > 40
    for path in files:
        for call in _error_calls(ast.parse(path.read_text(encoding="utf-8"))):
            parts = [*call.args, *(k.value for k in call.keywords if k.arg != "cli_hint")]
            for text in (s for part in parts for s in _strings(part)):
                if CLI_WORDS.search(text):
                    offenders.append(f"{path.relative_to(ROOT)}:{call.lineno}: {text[:80]!r}")
    assert not offenders, offenders
