"""What the library knows about one network (`NetworkSpec`) and a network ready to use (`Network`).

A spec holds everything that is specific to a network family: how to build it and where its weights
are, its preprocessing and class names, its named layers (the paper's names) and default layer, and
the choices attribution methods need (Grad-CAM's layer, LRP's canonizers, the Readout's reads).
Methods and the readout ask the spec; they keep no per-network tables.

Registered networks are described as an ordered list of *stages*: running them in order reproduces
the network, so splitting it at a layer into prefix and suffix is a slice of that list. A spec can
also be *derived* for any `nn.Module` (`derive_spec`): its layers are found by one dry forward pass
(`find_layers`: CNN feature maps and transformer tokens on a patch grid, see `tokens.py`), it has no
stages, and choices nobody knows (CAM layer, canonizers) are None, so the methods that need them say
they are unavailable; networks loaded from `torchvision:NAME` or a model card take the last feature
map larger than 1×1 as their CAM layer.

Where a network has no stages, `Network.fx_split` cuts it at the layer with `torch.fx` (`fx_split.py`)
so the bottleneck still runs the prefix once and only the suffix per step; where that is impossible
the bottleneck falls back to a forward hook. `Network.split_path(layer)` says which path a layer gets.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import torch
from PIL import Image
from torch import nn

from ..errors import UserError, quoted
from ..images import ImageError
from ..band_images import MultiBandImage, channels_text, load_input, photo_channels
from ..model_state import layer_tensor
from .blocks import reaches_output
from .tokens import MAP, FeatureLayout, layout_of_shape

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: Paper §4.1 uses torchvision's standard evaluation crop: resize the short side to 256, centre-crop 224.
RESIZE, CROP = 256, 224
#: Name of the network's output (the logits) where a list of layers may include it (readout reads).
LOGITS = "fc"
#: Resampling filters a preprocessing may name (torchvision's InterpolationMode values); bilinear is torchvision's.
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")
#: Images in `find_layers`' dry pass: two, so an output whose leading axis is not the batch (patches or windows
#: folded into it) is told from one that is, even where the fold leaves one row per image at batch one.
DRY_BATCH = 2
#: An unknown layer's message lists every layer of a network with at most this many, else the closest names.
MAX_LISTED_LAYERS = 20

Stages = list[tuple[str | None, nn.Module]]


class WeightsUnavailableError(UserError, RuntimeError):
    """The pretrained weights for a network are not on this machine and cannot be downloaded.

    A UserError (message + each front end's hint) that is still caught as a RuntimeError."""


class UnknownModelError(UserError, KeyError):
    """A network key or layer name that the registry does not know (a UserError still caught as a KeyError;
    its str is the sentence, not KeyError's quoted form)."""


class Flatten(nn.Module):
    """torch.flatten(x, 1) as a module, for the classifier stage of a stage list."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(x, 1)


class CardArch(NamedTuple):
    """What a source builds for a model card's arch (`sources.Source.card_arch`): the model (untrained, with the
    card's head), the source's preprocessing, its own class names, the head its configuration names (or None) and
    its readable layers by crop size (or None: found by the dry pass)."""

    model: nn.Module
    prep: dict
    categories: list[str]
    head: str | None = None
    blocks: Callable[[int], list[str]] | None = None


@dataclass(frozen=True)
class WeightsSource:
    """Where a network's pretrained weights come from."""

    file: str  # file name a user can place in IBA_WEIGHTS_DIR or torch's hub cache
    url: str | None = None  # download address (torchvision's), None for packaged weights
    packaged: Callable[[], Path | None] | None = None  # a file shipped by a Python package


@dataclass(frozen=True)
class LayerInfo:
    """One module found by the dry forward pass (`find_layers`): its output and whether it can hold a bottleneck."""

    name: str  # dotted module path
    shape: tuple[int, ...]  # output shape for one image, batch axis (1) included (`batched` False: as seen)
    runs: int  # times the module ran in one forward pass
    layout: FeatureLayout = MAP
    #: Whether the output's leading axis is the image batch. MobileViT's transformer folds each image's patch
    #: positions into that axis (batch·patch area rows): a bottleneck there would mix images and positions.
    batched: bool = True

    @property
    def kind(self) -> str:
        """"map" (CNN feature map (N, C, H, W)) or "tokens" (transformer tokens on a patch grid)."""
        return self.layout.kind

    @property
    def usable(self) -> bool:
        return self.runs == 1 and self.batched

    @property
    def reason(self) -> str | None:
        """Why the layer cannot hold a bottleneck (None when it can)."""
        if not self.batched:
            return (f"its output's leading axis ({self.shape[0]} for a batch of {DRY_BATCH} images) is not the image "
                    "batch (the module folds patches or windows into it, as MobileViT's transformer does), so a "
                    "bottleneck there would not see one image at a time")
        if self.runs == 1:
            return None
        return (f"it runs {self.runs} times in one forward pass (a module called more than once, e.g. "
                "torchvision ResNet's shared ReLU), so a bottleneck there would be ambiguous")

    def describe(self) -> str:
        """Its shape and kind for a layer picker, e.g. "512×28×28 map" or "197×768 tokens (14×14 grid + class
        token, 768 channels)"."""
        return self.layout.describe(self.shape)


@dataclass(frozen=True)
class NetworkSpec:
    """Everything specific to one network. See the module docstring."""

    key: str
    title: str
    build: Callable[[dict | None], nn.Module]  # state dict (None: random init) → model
    layers: tuple[str, ...]
    default_layer: str
    weights: WeightsSource | None = None
    categories: Callable[[], list[str]] | None = None  # class names in index order
    stages: Callable[[nn.Module], Stages] | None = None  # None: no split, the hook path is used
    hook_modules: dict[str, str] = field(default_factory=dict)  # layer → module path (hook path)
    mean: tuple[float, ...] = IMAGENET_MEAN  # one number per input channel
    std: tuple[float, ...] = IMAGENET_STD
    #: Input channels: 3 (RGB photos), 1 (grayscale: X-ray, CT, microscopy) or more (multispectral bands, read
    #: from .npy or TIFF files: `band_images.load_input`).
    channels: int = 3
    #: The three bands (counted from 0) shown as red, green, blue for an input of more bands; None: the first three.
    display_bands: tuple[int, int, int] | None = None
    resize: int = RESIZE
    crop: int = CROP
    #: Resampling filter of the resize (`INTERPOLATIONS`): timm and Hugging Face models name theirs (often bicubic).
    interpolation: str = "bilinear"
    #: What the outputs mean (`heads.HEADS`): "softmax" (exclusive classes), "sigmoid" (multi-label: independent
    #: labels, a model card's `head` or Hugging Face's problem_type), "binary" (one logit for two classes).
    head: str = "softmax"
    #: The same backbone with a head of n classes, untrained (a card's `arch = "<this key>"`); None: not offered.
    with_classes: Callable[[int], nn.Module] | None = None
    #: Grad-CAM: (module path, use the module's input); None: unknown, Grad-CAM is unavailable.
    cam_layer: tuple[str, bool] | None = None
    #: Why no CAM layer could be chosen (a derived spec's `cam_layer_of`), said with Grad-CAM's refusal.
    no_cam_reason: str = ""
    #: LRP: canonizers for a private copy of the model; None: unknown, LRP is unavailable.
    canonizers: Callable[[nn.Module], list] | None = None
    #: Readout Bottleneck: its bottleneck layer and the layers it reads (last: LOGITS).
    readout_layer: str | None = None
    readout_reads: tuple[str, ...] | None = None
    note: str = ""
    #: Image folder for the feature statistics (a model card's `stats_images`); None: the offline photos.
    stats_images: str | None = None
    #: Every module the dry forward pass found (derived specs), usable or not, in execution order; empty for
    #: registered networks (their layers are CNN maps, shapes from the stage list: `Network.layer_table`).
    layer_info: tuple[LayerInfo, ...] = ()

    def __post_init__(self) -> None:
        if len(self.mean) != self.channels or len(self.std) != self.channels:
            raise UserError(f"{self.title}: mean and std need one number per input channel ({self.channels}), got "
                             f"{len(self.mean)} and {len(self.std)}.")

    def layout(self, layer: str) -> FeatureLayout:
        """How `layer`'s output is arranged (CNN map or tokens on a patch grid; see `tokens.py`)."""
        for info in self.layer_info:
            if info.name == layer:
                return info.layout
        return MAP

    def check_layer(self, layer: str) -> str:
        """`layer` if the network has it, else a clear error naming the valid names (the closest ones when there
        are many)."""
        if layer not in self.layers:
            raise unknown_layer_error(self.title, layer, self.layers)
        return layer

    def reads(self) -> tuple[str, ...]:
        """The readout's read layers: the spec's own, else the readout layer, three later layers and the logits."""
        if self.readout_reads:
            return self.readout_reads
        layer = self.readout_layer or self.default_layer
        later = list(self.layers[self.layers.index(layer) + 1 :])
        picks = [later[round(i * (len(later) - 1) / 2)] for i in range(3)] if len(later) >= 3 else later
        return (layer, *dict.fromkeys(picks), LOGITS)


def unknown_layer_error(title: str, layer: str, layers: Sequence[str]) -> UnknownModelError:
    """"<title> has no layer 'x'; …": every valid name for a short list, else the closest few (difflib), so a
    typo in a network of hundreds of modules gets an answer a person can read."""
    given = quoted(str(layer).replace("\n", " "), 80)  # a name of 100,000 characters is not echoed whole
    if len(layers) <= MAX_LISTED_LAYERS:
        return UnknownModelError(f"{title} has no layer {given}; choose one of: {', '.join(layers)}.")
    close = difflib.get_close_matches(str(layer)[:200], list(layers), n=5, cutoff=0.5)
    named = f"the closest are {', '.join(close)}" if close else f"e.g. {', '.join(layers[:3])}"
    return UnknownModelError(f"{title} has no layer {given}; {named} (of {len(layers)} layers).",
                             cli_hint="`python -m iba_core models --model MODEL` lists them all.",
                             app_hint="The layer menu lists them all.")


def fit_channels(values: Sequence[float], channels: int) -> tuple[float, ...]:
    """A source's per-channel mean or std for a network of `channels` input channels: as they are when they have
    one number per channel; one number for every channel; a source's RGB numbers (timm's and transformers'
    defaults for a model built with other input channels) as their average for every channel, timm's own rule
    (`save_for_hf` writes mean [0.449] for a 1-channel ResNet)."""
    values = tuple(float(v) for v in values)
    if len(values) == channels:
        return values
    if len(values) in (1, 3):
        return (sum(values) / len(values),) * channels
    raise UserError(f"The preprocessing has {len(values)} numbers for mean or std, but the network takes "
                    f"{channels} input channels; give one number per channel.")


def input_channels_of(model: nn.Module, default: int | None = 3) -> int | None:
    """The input channels of a network's first convolution (the first registered: the stem, in torchvision's,
    timm's and transformers' CNNs and ViTs' patch embeddings), else `default`."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            return int(module.in_channels)
    return default


#: torch resamples tensors (multi-band images) with nearest, bilinear or bicubic only: the closest for the others.
TENSOR_INTERPOLATIONS = {"nearest": "nearest", "bilinear": "bilinear", "bicubic": "bicubic", "lanczos": "bicubic",
                         "box": "bilinear", "hamming": "bilinear"}


class Preprocess:
    """Resize (short side, with the network's resampling filter), centre-crop, normalise; the crop is exposed
    for display.

    channels: the network's input channels (default: one per mean). RGB networks read PIL images as they always
    did; a 1-channel network reads them in gray, its crop shown as that gray image in RGB form (the drawing code
    takes RGB); multi-band images (`band_images.MultiBandImage`) are resized as tensors (torch's interpolation,
    antialiased; `TENSOR_INTERPOLATIONS`) and their crop stays a MultiBandImage, shown as its composite of
    `display_bands`. An image whose channel count is not the network's is an ImageError naming both.
    """

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...], resize: int = RESIZE, crop: int = CROP,
                 interpolation: str = "bilinear", channels: int | None = None,
                 display_bands: tuple[int, int, int] | None = None):
        self.mean, self.std, self.resize, self.crop_size = mean, std, resize, crop
        self.interpolation = interpolation
        self.channels = len(mean) if channels is None else int(channels)
        if len(mean) != self.channels or len(std) != self.channels:
            raise UserError(f"mean and std need one number per channel ({self.channels}), got {len(mean)} and "
                             f"{len(std)}.")
        self.display_bands = display_bands

    @classmethod
    def of(cls, spec: NetworkSpec) -> "Preprocess":
        return cls(spec.mean, spec.std, spec.resize, spec.crop, spec.interpolation, spec.channels,
                   spec.display_bands)

    def load(self, source) -> Image.Image | MultiBandImage:
        """The image a file (path, bytes, upload) holds, read for this network's channels
        (`band_images.load_input`): a PIL image for gray and RGB networks, a MultiBandImage for array files."""
        return load_input(source, self.channels, self.display_bands)

    def crop(self, image: Image.Image | MultiBandImage) -> Image.Image | MultiBandImage:
        """The image the network sees (before normalisation): an RGB PIL image (for a 1-channel network its gray
        in RGB form), or a cropped MultiBandImage."""
        import torchvision.transforms.functional as TF
        from torchvision.transforms import InterpolationMode

        if isinstance(image, MultiBandImage):
            self._check_channels(image.bands)
            bands = torch.from_numpy(image.data).permute(2, 0, 1)
            mode = InterpolationMode(TENSOR_INTERPOLATIONS.get(self.interpolation, "bilinear"))
            bands = TF.center_crop(TF.resize(bands, self.resize, mode, antialias=True), self.crop_size)
            return MultiBandImage(bands.permute(1, 2, 0).numpy(), self.display_bands or image.display_bands,
                                  image.info)
        image = TF.center_crop(self.resized(image), self.crop_size)
        return image.convert("RGB") if self.channels == 1 else image

    def resized(self, image: Image.Image) -> Image.Image:
        """A photo resized as `crop` resizes it before its centre crop (short side to `resize`; gray for a 1-channel
        network): the planted-mark self-test draws on it, so the crop it takes later is exact."""
        import torchvision.transforms.functional as TF
        from torchvision.transforms import InterpolationMode

        if self.channels > 3:
            self._check_channels(photo_channels(image.mode))
        return TF.resize(image.convert("L" if self.channels == 1 else "RGB"), self.resize,
                         InterpolationMode(self.interpolation), antialias=True)

    def normalise(self, cropped: Image.Image | MultiBandImage) -> torch.Tensor:
        """A (1, channels, crop, crop) float tensor from an already cropped image (each channel normalised by its
        mean and std)."""
        import torchvision.transforms.functional as TF

        if isinstance(cropped, MultiBandImage):
            self._check_channels(cropped.bands)
            tensor = torch.from_numpy(cropped.data).permute(2, 0, 1).contiguous()
        elif self.channels == 1:
            tensor = TF.to_tensor(cropped.convert("L"))  # (a gray crop in RGB form has three equal channels)
        else:
            if self.channels > 3:  # a photo never has a multi-band network's channels
                self._check_channels(photo_channels(cropped.mode))
            tensor = TF.to_tensor(cropped if cropped.mode == "RGB" else cropped.convert("RGB"))
        return TF.normalize(tensor, self.mean, self.std)[None]

    def normalise_batch(self, crops: Sequence[Image.Image | MultiBandImage]) -> torch.Tensor:
        """(N, channels, crop, crop): `normalise` of each already cropped image, stacked. The same numbers; RGB
        photos of one size are converted as one tensor, since per-image tensor operations were most of a statistics
        pass's preprocessing on a busy 2-core CPU (each small operation waits for the thread pool's other thread)."""
        import numpy as np
        import torchvision.transforms.functional as TF

        rgb = self.channels == 3 and all(isinstance(c, Image.Image) and c.mode == "RGB" for c in crops)
        if not crops or not rgb or len({c.size for c in crops}) != 1:
            return torch.cat([self.normalise(c) for c in crops])
        pixels = torch.from_numpy(np.stack([np.asarray(c, dtype=np.uint8) for c in crops]))  # (N, H, W, 3)
        # as TF.to_tensor and TF.normalize do it for one image, on the batch: bit for bit the same values
        tensor = pixels.permute(0, 3, 1, 2).contiguous().to(torch.get_default_dtype()).div(255)
        return TF.normalize(tensor, self.mean, self.std, inplace=True)

    def _check_channels(self, found: int) -> None:
        if found != self.channels:
            raise ImageError(f"The image is a {channels_text(found)} image, but the network takes "
                             f"{channels_text(self.channels)} images.")

    def __call__(self, image: Image.Image | MultiBandImage) -> torch.Tensor:
        return self.normalise(self.crop(image))


def derive_spec(
    model: nn.Module,
    key: str,
    title: str | None = None,
    *,
    input_size: int = CROP,
    min_default_size: int | None = None,
    default_layer: str | None = None,
    guess_cam_layer: bool = False,
    layer_names: Sequence[str] | None = None,
    **fields,
) -> NetworkSpec:
    """A spec for any `nn.Module` classifier: layers found by one dry forward pass (`find_layers`).

    layer_names: the layers to offer, when the source knows which a person would pick (a timm or Hugging Face
    network's blocks and stages, `blocks.py`): the spec lists only those that are usable, in execution order,
    and its `layer_info` holds only them; None: every usable module.

    Layers are the modules (dotted names, in execution order) whose output is a CNN feature map
    (N, C, H, W) or transformer tokens on a patch grid (ViT (N, 1 + h·w, C), Swin (N, h, w, C)) and that
    run exactly once per forward pass; modules that run more often are kept in `layer_info`, marked
    unusable with the reason.

    Default layer (unless `default_layer` names one), by `default_layer_of`: for a transformer the middle
    one of its blocks; otherwise the last CNN map whose spatial size is at least `min_default_size` (default
    `default_map_size`: about an eighth of the input, 25 at 224 px: ResNet-50's conv3_4 is 28), else the first
    usable layer.
    Grad-CAM layer: None (unknown: Grad-CAM asks for a layer setting), or with `guess_cam_layer` (networks
    loaded from `torchvision:NAME`, timm, Hugging Face or a model card) by `cam_layer_of`: the last CNN map
    larger than 1×1 after every transformer block, else the last transformer block whose patches reach the
    head (the one before the last for a class-token ViT). No stages, canonizers or readout reads are known: the
    methods that need them say so. `fields` go to `NetworkSpec` as they are (class names, preprocessing, weights
    source, …).
    """
    # The sources that name their layers (timm, transformers) have blocks returning (hidden states, attention).
    infos = find_layers(model, input_size, tuples=layer_names is not None, channels=fields.get("channels", 3))
    listed = _offered_layers(infos, layer_names)
    usable = [info.name for info in listed if info.usable]
    if not usable:
        raise UserError(f"{title or key}: no module produces a (N, C, H, W) feature map or tokens on a patch "
                         "grid that runs once per forward pass; nothing to attribute.")
    blocks = transformer_blocks(model, listed)
    default = default_layer_of(listed, blocks, min_default_size or default_map_size(input_size))
    if default_layer is not None:
        if default_layer not in usable:
            raise unknown_layer_error(title or key, default_layer, usable)
        default = default_layer
    model_ref = model
    fields.setdefault("note", "Layers discovered by a dry forward pass.")
    if guess_cam_layer and "cam_layer" not in fields:
        # Among the offered layers where the source names them: the last stage, not a wrapper around it (a
        # transformers base model's output object, an Identity norm) that happens to pass the same map on.
        _guess_cam_layer(model, listed if layer_names is not None else infos, blocks, input_size, fields)
    return NetworkSpec(key=key, title=title or key, build=lambda state: _load_into(model_ref, state),
                       layers=tuple(usable), default_layer=default, hook_modules={n: n for n in usable},
                       layer_info=tuple(listed), **fields)


def _guess_cam_layer(model: nn.Module, pool: list[LayerInfo], blocks: list[str], input_size: int,
                     fields: dict) -> None:
    """`fields`' cam_layer by `cam_layer_of`, each choice checked against `model`; else its no_cam_reason."""
    channels = fields.get("channels", 3)
    cam_layer, why = cam_layer_of(pool, blocks, lambda name: reaches_output(model, name, input_size, channels))
    if cam_layer is not None:
        fields["cam_layer"] = cam_layer
    else:
        fields.setdefault("no_cam_reason", why)


def _offered_layers(infos: list[LayerInfo], layer_names: Sequence[str] | None) -> list[LayerInfo]:
    """The layers a spec offers: those of `layer_names` that are usable (all of `infos` if none is, or no names),
    and those named that fold patches into the batch axis, kept unusable so the layer table says why."""
    if layer_names is None:
        return infos
    wanted = set(layer_names)
    named = [info for info in infos if info.name in wanted and (info.usable or not info.batched)]
    return named if any(info.usable for info in named) else infos


#: At most this many CAM-layer choices are checked against the network (one forward pass each) by `cam_layer_of`.
CAM_TRIES = 6


def cam_layer_of(pool: list[LayerInfo], blocks: list[str],
                 reaches: Callable[[str], bool] = lambda name: True) -> tuple[tuple[str, bool] | None, str]:
    """((module path, use its input), "") for the CAM layer a derived spec guesses, or (None, why not).

    The rule, the same for every family: the last layer whose every position still reaches the logits.
    - A CNN map larger than 1 × 1 after every transformer block (`_last_map_after_blocks`): the last convolutional
      block's output (global pooling's 1 × 1 maps are skipped), or a Swin's final map.
    - Else a transformer's last block when its output has no unlocated tokens (average-pooled ViTs, Swin, MLP-Mixer:
      the head pools every patch). When it has a class, distillation or register token, the head reads only those:
      the patch tokens' gradients at the last block's output are zero and every gradient CAM would be blank. The
      last block's *input* (the block before it: its output) still reaches the class token through the last
      block's attention: that is the CAM layer (pytorch-grad-cam's ViT example reads the last block's first norm
      for the same reason).
    `reaches(name)` (`blocks.reaches_output`) checks a choice against the network: one the output does not depend
    on (PiT's last stage map, beside which its head reads a class token) gives way to the next of the rule's
    choices, then to the last other layer on the grid that reaches the output (at most `CAM_TRIES` in all).
    """
    choices = []
    last_map = _last_map_after_blocks(pool, blocks)
    if last_map is not None:
        choices.append((last_map, False))
    if blocks:
        layouts = {info.name: info.layout for info in pool}
        last = blocks[-1]
        if layouts[last].form != "nlc" or not layouts[last].extra_tokens:
            # the last token layer from the last block on: a stage that returns its last block's output is listed
            # under the stage's name (`blocks.py`), so the last block itself may be missing from `blocks`
            order = [info.name for info in pool]
            later = [info.name for info in pool[order.index(last):]
                     if info.usable and info.kind == "tokens" and not info.layout.extra_tokens]
            choices.append((later[-1], False))
        else:
            choices.append((blocks[-2], False) if len(blocks) > 1 else (last, True))
    on_grid = [(info.name, False) for info in reversed(pool)
               if info.usable and (info.kind == "tokens" or max(info.shape[-2:]) > 1)]
    choices += [choice for choice in on_grid if choice not in choices]
    for path, is_input in choices[:CAM_TRIES]:
        if is_input or reaches(path):  # a block's input reaches the output when the block does
            return (path, is_input), ""
    if not choices:
        return None, "its layers give no feature map larger than 1 × 1 and it has no transformer blocks"
    return None, "none of its last layers on the image grid reaches its output"


def _last_map_after_blocks(pool: list[LayerInfo], blocks: list[str]) -> str | None:
    """The last usable CNN map larger than 1×1 in `pool` that runs after every transformer block, if any (the
    Grad-CAM layer `derive_spec` guesses)."""
    order = [info.name for info in pool]
    after = order.index(blocks[-1]) if blocks else -1
    spatial = [info.name for i, info in enumerate(pool)
               if info.usable and info.kind == "map" and max(info.shape[-2:]) > 1 and i > after]
    return spatial[-1] if spatial else None


def default_map_size(input_size: int) -> int:
    """The smallest side of a CNN map that can be the default layer: about an eighth of the input's side (at least
    0.9 of it: 25 at 224 px, so ResNet-50's 28 × 28 conv3_4 in the paper; 43 at 384 px), so a default means the same
    depth at every input size."""
    return max(1, int(0.9 * input_size / 8))  # 0.9: valid padding trims a few pixels (Inception: 35 at 299 px)


def default_layer_of(infos: list[LayerInfo], blocks: list[str], min_size: int = 28) -> str:
    """The documented default bottleneck layer among `infos` (see `derive_spec`).

    Transformers (`blocks` found): the middle block, index (n − 1) // 2 (ViT-B/16: encoder_layer_5 of 12; Swin-T:
    features.5.1, the 6th of 12 blocks, on the 14×14 grid): deep enough to carry class evidence, still on a
    grid fine enough to locate it. CNNs: the last map of at least `min_size`×`min_size`, else the first
    usable layer.
    """
    if blocks:
        return blocks[(len(blocks) - 1) // 2]
    usable = [info for info in infos if info.usable]
    big = [info.name for info in usable if info.kind == "map" and min(info.shape[-2:]) >= min_size]
    return big[-1] if big else usable[0].name


def transformer_blocks(model: nn.Module, infos: list[LayerInfo]) -> list[str]:
    """The usable token layers that are a transformer's blocks, in execution order; [] for CNNs.

    Blocks are modules with children whose output is tokens on a grid, of the module class that occurs most
    often among those (the repeated block); when classes tie (a block and its MLP both appear once per block)
    the outermost wins: the one whose first instance has the shortest dotted path.
    """
    modules = dict(model.named_modules())
    by_class: dict[type, list[str]] = {}
    for info in infos:
        module = modules.get(info.name)
        if info.usable and info.kind == "tokens" and module is not None and next(module.children(), None) is not None:
            by_class.setdefault(type(module), []).append(info.name)
    if not by_class:
        return []
    most = max(len(names) for names in by_class.values())
    tied = [names for names in by_class.values() if len(names) == most]
    return min(tied, key=lambda names: names[0].count("."))


def _load_into(model: nn.Module, state: dict | None) -> nn.Module:
    if state is not None:
        model.load_state_dict(state)
    return model


def find_layers(model: nn.Module, input_size: int = CROP, *, tuples: bool = False,
                channels: int = 3) -> list[LayerInfo]:
    """Every module whose output is a CNN map or tokens on a patch grid, in execution order, by one dry pass.

    A module that runs more than once is listed once, with its run count (`LayerInfo.usable` is then False).
    Outputs that are not one tensor (tuples, dicts) and tensors on no grid (logits, pooled vectors) are left out;
    an output whose leading axis is not the batch of `DRY_BATCH` images is listed, unusable (`LayerInfo.batched`);
    with `tuples`, a module returning a tuple or mapping counts with its first tensor (`model_state.layer_tensor`:
    the hidden states of a transformers block that also returns attention weights, e.g. Swin's).
    """
    order: list[str] = []
    shapes: dict[str, tuple[int, ...]] = {}
    layouts: dict[str, FeatureLayout] = {}
    runs: dict[str, int] = {}
    handles = []

    def hook(name):
        def record(_m, _inp, out) -> None:  # returns None: the output is left as it is
            out = layer_tensor(out) if tuples else out
            if not isinstance(out, torch.Tensor):
                return
            if name not in runs:
                layout = layout_of_shape(tuple(out.shape), input_size)
                if layout is None:
                    return
                order.append(name)
                shapes[name], layouts[name] = tuple(out.shape), layout
            runs[name] = runs.get(name, 0) + 1

        return record

    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_hook(hook(name)))
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(DRY_BATCH, channels, input_size, input_size, device=device))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    infos = []
    for n in order:
        batched = shapes[n][0] == DRY_BATCH
        infos.append(LayerInfo(n, (1, *shapes[n][1:]) if batched else shapes[n], runs[n], layouts[n], batched))
    return infos
