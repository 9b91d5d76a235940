"""Heads from where networks come from: a model card's `head` (sigmoid, binary, or recognised from one output and
two names), a Hugging Face folder's problem_type; refused heads in one sentence; the CLI's JSON says the head."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from card_fixtures import make_resnet18, write_card, write_images
from iba_core.cli import main
from iba_core.errors import UserError
from iba_core.images import load_image
from iba_core.networks import ModelCardError, load_network
from iba_core.networks.card_format import card_text, read_card
from source_fixtures import edit_config, save_hf_vit

LABELS = ["cloud", "water", "road", "forest"]
#: Small crops keep a ResNet-18 card fast on two cores.
SMALL = '\n[preprocess]\nresize = 64\ncrop = 64\n'


def _card(folder, classes: list[str], outputs: int, head: str | None, name: str = "net", extra: str = ""):
    """A torchvision ResNet-18 card with `outputs` outputs saved as a state dict, a class list and `head`."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(make_resnet18(outputs).state_dict(), folder / f"{name}.pth")
    (folder / f"{name}.txt").write_text("\n".join(classes) + "\n")
    head_line = f'head = "{head}"\n' if head else ""
    return write_card(folder, name=name, weights=f"{name}.pth", classes=f"{name}.txt",
                      extra=head_line + extra + SMALL)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return str(next(iter(sorted(write_images(tmp_path_factory.mktemp("heads-images"), count=1, size=80).glob("*")))))


def test_a_sigmoid_card_through_the_cli(tmp_path, image, capsys):
    card = _card(tmp_path, LABELS, 4, "sigmoid")
    out = tmp_path / "h.npy"
    code = main(["attribute", image, "--model", str(card), "--target", "road", "--steps", "2", "--n", "4",
                 "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out.strip())
    assert summary["class_name"] == "road" and summary["target"] == 2 and summary["head"] == "sigmoid"
    heatmap = np.load(out)
    assert heatmap.shape == (64, 64) and np.isfinite(heatmap).all() and heatmap.std() > 0
    # p(target) is σ of the label's own logit
    net = load_network(card)
    x = net.preprocess(load_image(image))
    with torch.no_grad():
        z = net.model(x)[0]
    assert net.head == "sigmoid"
    assert summary["p_without"] == pytest.approx(float(torch.sigmoid(z[2])), rel=1e-4, abs=1e-6)
    probs = net.probabilities(x)
    assert probs.tolist() == pytest.approx(torch.sigmoid(z).tolist(), rel=1e-5)
    above = net.labels_above(x)
    assert [i for i, _, _ in above] == [i for i in torch.argsort(z, descending=True).tolist() if z[i] > 0]
    assert all(p > 0.5 for _, _, p in above)
    assert [i for i, _, _ in net.top_k(x, 4)] == torch.argsort(z, descending=True).tolist()


def test_a_binary_card_explains_the_negative_and_the_positive_class(tmp_path):
    card = _card(tmp_path, ["benign", "malignant"], 1, "binary")
    net = load_network(card)
    assert net.head == "binary" and net.categories == ["benign", "malignant"]
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        z = float(net.model(x)[0, 0])
    p = net.probabilities(x)
    assert p.tolist() == pytest.approx([1 - 1 / (1 + np.exp(-z)), 1 / (1 + np.exp(-z))], rel=1e-5)
    assert net.top_k(x, 2)[0][1] == ("malignant" if z > 0 else "benign")


def test_one_output_and_two_names_is_binary_without_saying_so(tmp_path):
    card = _card(tmp_path, ["no", "yes"], 1, None, extra="[arch_args]\nnum_classes = 1\n")
    assert load_network(card).head == "binary"
    plain = _card(tmp_path / "plain", ["no", "yes"], 2, None)
    assert load_network(plain).head == "softmax"


def test_refused_heads_say_why_in_one_sentence(tmp_path):
    tanh = _card(tmp_path / "tanh", LABELS, 4, "tanh")
    with pytest.raises(ModelCardError, match=r"head must be one of softmax, sigmoid, binary, not 'tanh'\.$"):
        read_card(tanh)
    three = _card(tmp_path / "three", ["a", "b", "c"], 1, "binary")
    with pytest.raises(ModelCardError, match=r"binary head, which needs a class list of two names .*not 3\.$"):
        load_network(three)
    two_outputs = _card(tmp_path / "two", ["a", "b"], 2, "binary", extra="[arch_args]\nnum_classes = 2\n")
    with pytest.raises(ModelCardError, match=r"binary head, which needs one output .*the network has 2\.$"):
        load_network(two_outputs)
    # two names, one-output weights, no head: the message says what to declare
    undeclared = _card(tmp_path / "undeclared", ["a", "b"], 1, None)
    with pytest.raises(UserError) as err:
        load_network(undeclared)
    assert 'head = "binary"' in err.value.cli_hint


def test_card_text_writes_the_head():
    text = card_text(arch="torchvision:resnet18", classes="c.txt", head="sigmoid")
    assert 'head = "sigmoid"' in text
    assert "head" not in card_text(arch="torchvision:resnet18")


def test_a_hugging_face_folder_saved_as_multi_label_is_sigmoid_and_a_card_may_override_it(tmp_path, monkeypatch):
    folder = save_hf_vit(tmp_path / "vit", classes=LABELS)
    assert load_network(folder).head == "softmax"
    edit_config(folder, problem_type="multi_label_classification")
    net = load_network(folder)
    assert net.head == "sigmoid" and net.categories == LABELS
    # a card on that architecture (hf:ORG/NAME, here from a stand-in cache) takes its head unless it names one
    from iba_core.networks import hub

    monkeypatch.setattr(hub, "hub_file", lambda repo, filename, **_: (folder / filename)
                        if (folder / filename).is_file() else None)
    monkeypatch.setattr(hub, "hub_offline", lambda: True)
    (tmp_path / "labels.txt").write_text("\n".join(LABELS) + "\n")
    card = tmp_path / "scenes.toml"
    card.write_text('arch = "hf:someone/scenes-vit"\nclasses = "labels.txt"\n')
    assert load_network(card).head == "sigmoid"
    card.write_text('arch = "hf:someone/scenes-vit"\nclasses = "labels.txt"\nhead = "softmax"\n')
    assert load_network(card).head == "softmax"


def test_coiba_on_a_card_with_the_default_precision_of_a_bf16_cpu(tmp_path, image, capsys, monkeypatch):
    """A range that runs through forward hooks (a block and its parent): "auto" on a CPU with bf16 measured the
    hook path without its image and crashed (AttributeError, exit 70); the JSON names the precision that ran and
    p(target) without the bottleneck is the fp32 network's."""
    from iba_core import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx512_bf16", "amx_bf16"})
    monkeypatch.setattr(precision, "cuda_bf16", lambda: False)
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))  # a fresh precision memo: "auto" measures
    card = _card(tmp_path, LABELS, 4, None)
    code = main(["attribute", image, "--model", str(card), "--method", "coiba", "--layer-range", "layer3.0:layer3",
                 "--steps", "2", "--batch", "2", "--n", "4"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["precision"] in ("fp32", "bf16") and summary["path"] == "hook" and summary["beta_k"] == 1.0
    net = load_network(card)
    with torch.no_grad():
        want = float(torch.softmax(net.model(net.preprocess(load_image(image))), dim=1)[0, summary["target"]])
    assert summary["p_without"] == pytest.approx(want, rel=1e-4, abs=1e-6)
