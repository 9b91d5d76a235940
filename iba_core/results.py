"""Result types: what a bottleneck fit, a method, and a β × layer grid cell hand to the layers above and to drawing.

They sit low (beside the math) so `render/` can name them without importing the science that makes them, and so a
result's notes (the class lost, a class the network does not recognise) are computed in one place.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from .bottleneck import BottleneckSettings
from .heads import PRESENT_P


@dataclass
class StepInfo:
    """What one optimisation step looked like.

    The maps (λ, bits) are read where the heatmap is read (`BottleneckSettings.read_point`): for "final", λ
    after this step's Adam update, so the last step's maps are the result's heatmap and λ; for "last_step",
    the step's forward pass, before its update (the last step again is the result's). The loss terms and
    p(target) are those of the step's forward pass: what the update followed.
    """

    step: int  # 1-based
    steps: int
    lambda_mean: np.ndarray  # (h, w): λ averaged over channels, at the read point
    bits_per_pixel: np.ndarray  # (H, W) heatmap at the read point
    ce: float  # L_CE on the step's noisy batch (forward pass)
    info: float  # L_I in nats (forward pass: the loss term)
    beta_info: float  # β·L_I, the term that enters the loss
    p_target: float  # mean p(target) on the step's noisy batch (forward pass)
    image: int = 0  # which image of a batched run (attribute_batch)
    #: Bits at the read point through tokens without a place on the image (a ViT's class token): not in
    #: bits_per_pixel; bits_per_pixel.sum() + unlocated_bits is the step's total (the result's total_bits at
    #: the last step).
    unlocated_bits: float = 0.0


@dataclass
class AttributionResult:
    """Everything a view or a script needs from one run."""

    heatmap: np.ndarray  # (H, W) bits per input pixel; sums to total_bits − unlocated_bits
    feature_bits: np.ndarray  # (h, w) bits per feature-map cell
    lambda_mean: np.ndarray  # (h, w) final λ averaged over channels
    total_bits: float
    target: int
    p_without: float  # p(target) of the unmodified network
    p_with: float  # mean p(target) with the fitted bottleneck, on a fresh noisy batch
    history: list[StepInfo] = field(default_factory=list)
    seconds: float = 0.0
    settings: BottleneckSettings = field(default_factory=BottleneckSettings)
    feature_shape: tuple[int, int, int] = (0, 0, 0)  # (C, h, w) of the layer's map (view)
    precision: str = "fp32"  # what the network passes ran in (settings.precision "auto" resolved)
    #: Bits that passed through tokens without a place on the image (a ViT's class token): in total_bits,
    #: not in the heatmap. 0 for CNN layers and Swin.
    unlocated_bits: float = 0.0
    #: How the network ran: "stages" or "fx" (prefix once, suffix per step), "hook" (whole network per
    #: step), "split" (prefix and suffix given by the caller).
    path: str = ""
    #: The network's own top-1 class for the image and its probability (unmodified network); -1 when unknown.
    predicted: int = -1
    p_predicted: float = float("nan")
    #: What the network's outputs mean (`heads.py`): p_without, p_with and the loss follow it.
    head: str = "softmax"

    def bits_text(self) -> str:
        """'7,542 bits in fp32': the total with the precision the network passes ran in, said together (the same
        photo in another precision gives other bits: 7,481.5 in bf16, 7,541.8 in fp32)."""
        return f"{self.total_bits:,.0f} bits in {self.precision}"

    @property
    def lost_class(self) -> bool:
        """True when the bottleneck kept too little for the class (see `bottleneck_lost_class`)."""
        return bottleneck_lost_class(self.p_without, self.p_with, self.head)

    @property
    def target_note(self) -> str:
        """A warning when the network hardly recognises the explained class (`target_note`), else ""."""
        return target_note(self.p_without, self.p_with, self.predicted < 0 or self.predicted == self.target,
                           self.head)

    def summary(self) -> dict:
        """JSON-friendly summary without the arrays."""
        return {
            "target": self.target,
            "head": self.head,
            "p_without": self.p_without,
            "p_with": self.p_with,
            "bottleneck_lost_class": self.lost_class,
            "predicted": self.predicted,
            "p_predicted": self.p_predicted,
            "target_note": self.target_note,
            "total_bits": self.total_bits,
            "seconds": self.seconds,
            "feature_shape": list(self.feature_shape),
            "precision": self.precision,
            "unlocated_bits": self.unlocated_bits,
            "path": self.path,
            # the precision that ran ("auto" resolved), and what was asked for beside it
            "settings": {**asdict(self.settings), "precision": self.precision,
                         "precision_asked": self.settings.precision},
            "history": [
                {"step": h.step, "ce": h.ce, "info_nats": h.info, "beta_info": h.beta_info, "p_target": h.p_target}
                for h in self.history
            ],
        }


StepCallback = Callable[[StepInfo], None]

#: p(target) with the bottleneck below this, or below LOST_CLASS_RATIO × p(target) without it, means the
#: bottleneck discarded the class: the map then shows what survived, not what the class needs (paper §4.1:
#: large β such as 1000/k discard all information).
LOST_CLASS_P = 0.01
LOST_CLASS_RATIO = 0.1
LOST_CLASS_MESSAGE = "it discarded the class, so the map shows what survived, not what the class needs"


#: Below this p(target) of the unmodified network, the network does not recognise the explained class well:
#: the map then explains a guess. 10 %: a hundred times ImageNet's chance level, and well below what the offline
#: network gives the sample photos it recognises (chelsea "Egyptian cat" 0.36, coffee "espresso" 0.84, rocket
#: "missile" 0.41), while the astronaut photo it does not know gets 0.03 ("ping-pong ball").
LOW_P_TARGET = 0.10


#: p(target) must at least double, and by 5 percentage points, before the note explains a rise: small rises are
#: the noise of the fresh noisy batch, not the bottleneck removing the other classes' evidence.
RISE_FACTOR, RISE_POINTS = 2.0, 0.05


def target_note(p_without: float, p_with: float, is_top1: bool, head: str = "softmax") -> str:
    """A sentence when the explained class has p below LOW_P_TARGET or is not the network's top-1, else "".

    Below LOW_P_TARGET the network does not recognise the image as the class; a class that is only not the
    top-1 (a runner-up with a fair p) is just named as such. When p(target) rises clearly with the bottleneck
    (RISE_FACTOR, RISE_POINTS), the note says why: the bottleneck removed the evidence for the other classes, so
    the rise does not mean the image shows the class.

    A similarity head (CLIP: cosines with text prompts) has neither: only a prompt that is not the most similar
    one is named as such.

    A sigmoid (multi-label) head's labels are independent: a label with p ≥ PRESENT_P (50 %) is recognised
    whether or not it is the top-1, one below it is not, and a rise comes from removing what speaks against
    the label (the other labels do not compete with it).
    """
    if head == "similarity":  # a CLIP model: cosines with prompts, no probability and no recognition threshold
        if is_top1:
            return ""
        return (f"Another prompt is more similar to the image than this one (cosine {p_without:.3f}): the map shows "
                "what the similarity to this prompt takes from the image.")
    if head == "sigmoid":
        if p_without >= PRESENT_P:
            return ""
        note = (f"The network does not see this label in the image: p(target) is only {100 * p_without:.1f} % (a "
                f"multi-label network's labels are independent; a label counts as present from "
                f"{100 * PRESENT_P:.0f} %).")
        if p_with >= RISE_FACTOR * p_without and p_with - p_without >= RISE_POINTS:
            note += (f" p(target) rises to {100 * p_with:.1f} % with the bottleneck because the bottleneck removed "
                     "what speaks against this label, not because the image shows it.")
        return note
    if p_without < LOW_P_TARGET:
        top = "" if is_top1 else ", and it is not the network's top prediction"
        note = (f"The network does not recognise this image as the explained class: p(target) is only "
                f"{100 * p_without:.1f} % (below {100 * LOW_P_TARGET:.0f} %){top}.")
    elif not is_top1:
        note = (f"The explained class is not the network's top prediction (p(target) {100 * p_without:.1f} %): the "
                "map shows what this class takes from the image, not why the network predicts its top class.")
    else:
        return ""
    if p_with >= RISE_FACTOR * p_without and p_with - p_without >= RISE_POINTS:
        note += (f" p(target) rises to {100 * p_with:.1f} % with the bottleneck because the bottleneck removed "
                 "what supports the other classes, not because the image shows this class.")
    return note


def bottleneck_lost_class(p_without: float, p_with: float, head: str = "softmax") -> bool:
    """Whether a fitted bottleneck kept too little for the class: p_with < 1 % or < p_without / 10. Never for the
    similarity head (a CLIP model's cosines, −1…1): those thresholds are probabilities' and would misfire (a
    similarity of 0.2 falling to 0.015 is not a lost prompt, one of −0.1 "rising" to −0.3 is not either)."""
    if head == "similarity":
        return False
    return p_with < LOST_CLASS_P or p_with < LOST_CLASS_RATIO * p_without


@dataclass
class AttributionMap:
    """A method's map for one image, with what a view needs to draw it."""

    key: str
    name: str
    values: np.ndarray  # (H, W) float32
    signed: bool
    unit: str
    seconds: float
    extra: dict = field(default_factory=dict)  # method-specific numbers, e.g. the bottleneck's total bits


@dataclass
class GridCell:
    """One heatmap of the grid."""

    row: str  # "beta" or "layer"
    label: str  # what varies along the row: "β·k = 10" or the layer name
    beta_k: float
    layer: str
    heatmap: np.ndarray  # (224, 224) bits per pixel
    p_with: float  # p(target) with the bottleneck
    total_bits: float
    p_without: float = float("nan")  # p(target) without the bottleneck
    #: the bottleneck discarded the class (`per_sample.bottleneck_lost_class`): the map shows what survived,
    #: not what the class needs (paper §4.1: β ≥ 1000/k discards all information)
    lost_class: bool = False
    #: The explained class, and the network's own top-1 for the image (unmodified network; -1: unknown) with
    #: its probability: the same in every cell of a grid (one image, one class).
    target: int = -1
    predicted: int = -1
    p_predicted: float = float("nan")
    #: A CoIBA cell's last layer (its range runs from `layer` to here); "" for a one-layer bottleneck.
    last: str = ""

    @property
    def where(self) -> str:
        """Where its bottleneck sat (`bottleneck_place`): "block3_2", or CoIBA's "block3_2 … block7_1"."""
        return bottleneck_place(self.layer, self.last)

    @property
    def name(self) -> str:
        """Both settings of the cell: "β·k = 1000 at block3_2" (CoIBA's: "… at CoIBA block3_2 … block7_1")."""
        return cell_name(self.beta_k, self.layer, self.last)


def bottleneck_place(layer: str, last: str = "") -> str:
    """A one-layer bottleneck's layer, or CoIBA's range from `layer` to `last` ("block3_2 … block7_1")."""
    if not last:
        return layer
    return range_label(layer, last)


def cell_name(beta_k: float, layer: str, last: str = "") -> str:
    """A cell's settings in words: "β·k = 1000 at block3_2", CoIBA's "β·k = 10 at CoIBA block3_2 … block7_1"."""
    return f"β·k = {beta_k:g} at {'CoIBA ' if last else ''}{bottleneck_place(layer, last)}"


def range_label(first: str, last: str) -> str:
    """"block3_2 … block7_1" (one name for a one-layer range): how pages, keys and tables name a range."""
    return first if first == last else f"{first} … {last}"
