"""IBA Explorer's library: Information Bottleneck Attribution (Schulz et al., ICLR 2020).

The public names, for scripts and notebooks:

    >>> from iba_core import load_network, load_image, get_stats, PerSampleBottleneck
    >>> net = load_network("efficientnet_lite0")                 # offline, pretrained
    >>> x = net.preprocess(load_image("photo.jpg"))             # any channels: net.preprocess.load(path)
    >>> stats = get_stats(net, net.spec.default_layer)          # μ_R, σ_R (cached)
    >>> result = PerSampleBottleneck.for_network(net, net.spec.default_layer, stats).attribute(x)
    >>> result.heatmap.shape, result.total_bits, net.class_name(result.target)

Every attribution method shares one call: `get_method("grad_cam").attribute(net, x, target)`.
A folder run (`python -m iba_core attribute FOLDER --out RUN_DIR`) opens with `open_run(RUN_DIR)`.
Names are imported on first use, so `import iba_core` stays light.
"""
from __future__ import annotations

from .lazy import lazy_exports

#: public name → module that defines it
_PUBLIC = {
    # networks
    "load_network": "networks", "network_from_module": "networks", "get_spec": "networks",
    "Network": "networks", "NetworkSpec": "networks", "REGISTRY": "networks", "DEFAULT_NETWORK": "networks",
    # images
    "load_image": "images", "load_sample": "images", "sample_image_names": "images", "load_input": "band_images",
    "MultiBandImage": "band_images",
    # statistics
    "FeatureStats": "feature_stats", "get_stats": "feature_stats",
    # bottlenecks
    "PerSampleBottleneck": "per_sample", "BottleneckSettings": "bottleneck", "AttributionResult": "results",
    "ReadoutBottleneck": "readout", "load_readout": "readout",
    # methods
    "get_method": "methods", "method_keys": "methods", "display_names": "methods", "AttributionMap": "results",
    "Method": "methods", "register_method": "methods",
    "compare": "compare",
    # metrics
    "degradation_curves": "metrics", "bbox_ratio": "metrics", "logit_drops": "metrics", "correlations": "metrics",
    "sanity_check": "metrics", "per_sample_row": "metrics",
    # folder runs
    "open_run": "runs",
}

__all__ = sorted(_PUBLIC)


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
