"""One registry of model sources (issue 26.4): every key goes through `sources.SOURCES` in one order, for loading
(`load_network`), checking (`check_network_key`, the CLI's --model) and a model card's arch."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from iba_core.errors import UserError
from iba_core.networks import REGISTRY, SOURCES, UnknownModelError, check_network_key, load_network
from iba_core.networks.sources import source_of


def test_each_key_form_has_one_source_in_one_order(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "card.toml").write_text('arch = "efficientnet_lite0"\n')
    assert [s.name for s in SOURCES] == ["builtin", "torchvision", "timm", "hf", "clip", "folder", "card"]
    named = {key: source_of(key).name for key in (
        "efficientnet_lite0", "torchvision:resnet18", "timm:resnet18", "hf:google/vit-base-patch16-224",
        "clip:openai/clip-vit-base-patch32", f"clip:{tmp_path / 'folder'}",
        str(tmp_path / "folder"), tmp_path / "folder", str(tmp_path / "card.toml"), tmp_path / "card.toml")}
    assert list(named.values()) == ["builtin", "torchvision", "timm", "hf", "clip", "clip", "folder", "folder", "card",
                                    "card"]
    assert source_of("no such network") is None
    for source in SOURCES:
        assert callable(source.recognises) and callable(source.check) and callable(source.load)
    assert {s.name for s in SOURCES if s.card_arch is not None} == {"torchvision", "timm", "hf"}


def test_a_folder_named_like_a_builtin_stays_the_builtin(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "efficientnet_lite0").mkdir()
    assert source_of("efficientnet_lite0").name == "builtin"
    assert check_network_key("efficientnet_lite0") == "efficientnet_lite0"


def test_checking_and_loading_follow_the_same_source(tmp_path: Path) -> None:
    """Checking and loading ask the same source: a folder that is no model folder gets one sentence from both."""
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(UserError) as checked:
        check_network_key(str(folder))
    with pytest.raises(UserError) as loaded:
        load_network(str(folder))
    assert str(checked.value) == str(loaded.value) and "no model folder" in str(checked.value)


@pytest.mark.parametrize("key, words", [
    ("resnet18", "give a registered key"),
    ("card:fruit", "is the key of a model card's network"),
    ("folder:fruit", "is the key of a model folder's network"),
    ("torchvision:nonet", "torchvision has no classification network"),
])
def test_unknown_keys_say_what_is_accepted_in_both_ways(key, words) -> None:
    for call in (check_network_key, load_network):
        with pytest.raises(UnknownModelError, match=words):
            call(key)


def test_every_source_loads_its_network_through_the_registry(tmp_path: Path) -> None:
    from source_fixtures import save_timm_folder

    folder = save_timm_folder(tmp_path / "fruit-resnet")
    net = load_network(folder)
    assert net.key == "folder:fruit-resnet" and len(net.categories) == 5
    assert load_network("torchvision:resnet18", weights="random").key == "torchvision:resnet18"
    builtin = load_network("efficientnet_lite0", weights="random")
    assert builtin.spec is REGISTRY["efficientnet_lite0"] and len(builtin.categories) == 1000
