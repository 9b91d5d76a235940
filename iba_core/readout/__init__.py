"""The Readout Bottleneck (paper §3.3, Fig. 2): a small network predicts λ for any image in one go.

First pass (no noise): the analysed network runs once and we collect the feature maps of several
layers and the logits. A *readout network* maps them to α at the bottleneck layer's resolution:

    normalise each map per channel  →  resize bilinearly to (h, w) (logits: broadcast over space)
    →  concatenate  →  1×1 conv → ReLU → 1×1 conv → ReLU → 1×1 conv  →  α

and λ = blur(σ_s, sigmoid(α)) exactly as for the Per-Sample Bottleneck (`bottleneck.lambda_from_alpha`).
Second pass (training only): Z = λR + (1-λ)ε replaces R and the rest of the network runs on Z.
The analysed network is never trained; only the readout network is.

Which layers it reads is the network's business: `NetworkSpec.readout_layer` and `spec.reads()`
(the paper's choice for ResNet-50 and VGG-16, a generic one for other networks). Objects derived
from a network (its cut passes, loaded readouts) are kept in the network's cache (`network.memo`), never in
module state.

    >>> from iba_core.readout import default_checkpoint, load_readout
    >>> rb = load_readout(default_checkpoint(net.key), net)
    >>> bits = rb.heatmap(net.preprocess(image))            # (224, 224) bits per pixel, one pass

Modules
- `config`: ReadoutConfig (stored in checkpoints), ReadoutCheckpointError, compatibility checks;
- `network`: the readout network and the analysed network cut at the read layers (NetworkPasses);
- `bottleneck`: ReadoutBottleneck (training loss, heatmap, explain) and ReadoutResult;
- `checkpoints`: save / load / validate / export, the shipped checkpoints, cached readouts;
- `training`: data, statistics, distributed helpers and the training loop (`train_readout`).
The method interface's `readout` method lives in `iba_core.methods.bottlenecks`.
"""
from __future__ import annotations

from ..networks import LOGITS
from .bottleneck import ReadoutBottleneck, ReadoutOutput, ReadoutResult
from .checkpoints import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    cached_readout,
    default_checkpoint,
    export_for_inference,
    load_checkpoint,
    load_readout,
    make_checkpoint,
    readout_attribute,
    readout_from_checkpoint,
    save_checkpoint,
    state_digest,
)
from .config import ALPHA_MAX, DEFAULT_HIDDEN, ReadoutCheckpointError, ReadoutConfig, check_compatible
from .network import NetworkPasses, ReadoutNetwork, network_passes
from .training import (
    DataError,
    ImageFolderDataset,
    SamplePhotoDataset,
    TrainConfig,
    channel_stats,
    compute_statistics,
    folder_labels,
    offline_photos,
    train_readout,
)

__all__ = [
    "ALPHA_MAX", "CHECKPOINT_FORMAT", "CHECKPOINT_VERSION", "DEFAULT_HIDDEN", "DataError", "ImageFolderDataset",
    "LOGITS", "NetworkPasses", "ReadoutBottleneck", "ReadoutCheckpointError", "ReadoutConfig", "ReadoutNetwork",
    "ReadoutOutput", "ReadoutResult", "SamplePhotoDataset", "TrainConfig", "cached_readout", "channel_stats",
    "check_compatible", "compute_statistics", "default_checkpoint", "export_for_inference", "folder_labels",
    "load_checkpoint", "load_readout", "make_checkpoint", "network_passes", "offline_photos", "readout_attribute",
    "readout_from_checkpoint", "save_checkpoint", "state_digest", "train_readout",
]
