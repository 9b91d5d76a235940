"""Training the Readout Bottleneck (paper §3.3): data, statistics, the training loop, checkpoints and DDP.

Loss per batch: CE(noisy logits, label) + β·L_I with β = beta_k / k (paper: β = 10/k, Adam,
lr 1e-5, batch 16, 10 epochs, σ_s = 1). Only the readout network is trained; the analysed network
stays frozen in eval mode.

Data (`data`)
- An image folder. Labels (``labels="auto"``), by the rules of `iba_core.labels`:
  * images directly in the folder (no sub-folders) are unlabelled: the label is the analysed
    network's own top-1 on the same (augmented) crop, from the clean first pass;
  * ImageNet-style class folders named by **class index** (``0`` … ``999``) or by the **class name**
    as the network lists it (``tabby``, case-insensitive) map directly;
  * folders named by **WordNet id** (``n02123045``): by ``class_map`` (LOC_synset_mapping.txt, any text
    file with one wnid per line in class-index order, or Keras' imagenet_class_index.json) or a label file
    in the folder; else, for an ImageNet-1k network, the wnid's ImageNet-1k index (any subset of classes);
    else the wnid's ImageNet names in the network's class list — the same rules as `evaluate`, never the
    sorted order of the folders present;
  * ``labels="top1"`` ignores folders and always uses the network's top-1.
- Or augmented crops of the offline sample photos (``sample_photos=N`` crops per epoch), labelled
  with the network's top-1.
Augmentation: random resized crop (scale 0.25–1, aspect 3/4–4/3, the same helper the feature
statistics use) and horizontal flip, seeded per (seed, epoch, index): runs, resumes and any number of
data-loader workers or ranks give the same crops.

Modules: `config` (TrainConfig), `data` (datasets), `statistics` (what a readout needs before
training), `distributed` (torchrun helpers), `preview` (per-epoch heatmaps), `loop` (train_readout).

Distributed (`distributed`): under ``torchrun`` (WORLD_SIZE > 1) the readout is wrapped in
DistributedDataParallel (gloo on CPU, nccl on CUDA), a DistributedSampler splits each epoch across
ranks, statistics are computed on rank 0 and broadcast, and only rank 0 writes files.
"""
from __future__ import annotations

from ...image_sources import offline_photos
from ...labels import DataError, folder_labels, read_class_map
from .config import RESUME_OVERRIDABLE, TrainConfig
from .data import ImageFolderDataset, SamplePhotoDataset, SkipSampler, build_dataset
from .distributed import DistInfo, setup_distributed
from .loop import train_readout
from .preview import PREVIEW_SAMPLE, save_preview
from .readout_stats import channel_stats, compute_statistics

__all__ = [
    "DataError", "DistInfo", "ImageFolderDataset", "PREVIEW_SAMPLE", "RESUME_OVERRIDABLE", "SamplePhotoDataset",
    "SkipSampler", "TrainConfig", "build_dataset", "channel_stats", "compute_statistics", "folder_labels",
    "offline_photos", "read_class_map", "save_preview", "setup_distributed", "train_readout",
]
