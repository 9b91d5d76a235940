"""How the Dataset page and its report name a run's network and layer (issue #28): a run of methods that read the
whole network has no bottleneck layer, and says so in words instead of "layer None"."""
from types import SimpleNamespace

from iba_core.app import dataset as ds


def test_a_run_without_a_bottleneck_says_it_has_no_layer():
    run = SimpleNamespace(info={"network": "resnet50", "layer": None,
                                "methods": {"saliency": {"settings": {}}, "gradcam": {"settings": {}}}})
    assert "None" not in ds.run_line(run)
    assert ds.run_line(run) == "network resnet50 · layer none (its methods read the whole network)"


def test_a_run_names_its_bottleneck_layers():
    run = SimpleNamespace(info={"network": "card:tiny", "layer": "features.3",
                                "methods": {"iba_10": {"settings": {"layer": "features.3"}},
                                            "readout": {"settings": {"layer": "features.1"}}}})
    assert ds.layer_text(run) == "features.1, features.3"
    assert ds.run_line(run) == "network card:tiny · layer features.1, features.3"
