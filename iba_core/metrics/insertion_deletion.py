"""Insertion and deletion (Petsiuk et al., BMVC 2018, "RISE", §4): the field's causal yardsticks.

Pixels are ranked by the map, most relevant first (ties broken by a seeded random order, so a flat map
scores like a random one rather than favouring the top-left corner). `step` pixels at a time,

- deletion replaces them in the image with a baseline (zeros of the network's normalised input, or the
  blurred image): a faithful map makes p(target) fall fast — a low area is good;
- insertion starts from the blurred image and puts the original pixels back: a faithful map makes
  p(target) rise fast — a high area is good.

p(target) is the head's probability (`heads.probabilities`: softmax; σ per label for sigmoid heads; the
binary head's side), measured on the image before the first step and after every step (the last step
may be shorter), n = ⌈H·W / step⌉ + 1 points. The area is RISE's normalised trapezoid on evenly spaced
points, (Σ aᵢ − a₀/2 − aₙ₋₁/2)/(n − 1) ∈ [0, 1]. Both curves cost 2n forward passes an image (RISE on a
224 × 224 crop: 450; CoIBA: 58).

The blur. Like RISE, the *normalised* input is blurred (the network's input, after mean/std), with
torchvision's `gaussian_blur`: a sampled Gaussian of σ truncated to kernel × kernel, normalised to sum 1,
reflect padding at the borders. RISE's own kernel is scipy's `gaussian_filter` of a delta inside the
kernel window (the mass beyond the window reflected back into it, so almost a box filter: centre/corner
weight 1.14 for 11 × 11, σ 5, against 2.72 here), applied by a zero-padded convolution. Measured on
efficientnet_lite0's input for chelsea, coffee and astronaut: the two blurs differ by 0.014–0.026 on
average away from the borders (11 × 11, σ 5; 0.006–0.013 for 51 × 51, σ 50), 1–2 % of the input's
standard deviation (0.67–1.36), and by 0.09–0.32 within kernel/2 pixels of the border, where RISE's
zero padding pulls the blur towards 0. Zeros of the normalised input are the dataset's mean colour for
a network normalised with its dataset's mean.

The protocol is part of every result: `PixelProtocol.identity()` is in every result key, `describe()`
under every table. RISE (224 pixels a step, deletion to zeros, blur 11 × 11, σ 5) and CoIBA
(1,792 pixels a step, deletion to the blur, blur 51 × 51, σ 50) are named in `PROTOCOLS`.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import UserError
from ..heads import probabilities
from ..progress import ProgressFn
from ..tiles import degrade
from .common import batched_logits, group_records, method_label, pixel_order, resolve_map

INSERTION, DELETION = "insertion", "deletion"  # metric names (CLI, records, columns)
DELETION_BASELINES = ("zeros", "blur")
#: The protocols' names as their papers write them (keys stay lower case in the CLI and in results).
PROTOCOL_NAMES = {"rise": "RISE", "coiba": "CoIBA"}


#: Bounds of a protocol's numbers, so every result is finite: a step beyond any crop (10⁸ pixels is a 10,000 ×
#: 10,000 image) and a blur between 0.1 px (below, the kernel's neighbours weigh under e⁻⁵⁰: no blur, and at σ ≈
#: 1e-200 its 1/σ² overflows and every score came out empty) and 1,000 px (far wider than any crop).
MAX_STEP = 10**8
BLUR_SIGMA_RANGE = (0.1, 1000.0)


@dataclass(frozen=True)
class PixelProtocol:
    """How insertion and deletion perturb an image: pixels a step, deletion's baseline, insertion's blur."""

    name: str = "rise"
    step: int = 224  # pixels per step (RISE: 224 on a 224 × 224 crop, 224 steps)
    deletion_baseline: str = "zeros"  # "zeros" (zeros of the network's normalised input) or "blur"
    blur_kernel: int = 11  # insertion starts from (and "blur" deletion goes to) a Gaussian blur
    blur_sigma: float = 5.0

    def __post_init__(self) -> None:
        if isinstance(self.step, bool) or not isinstance(self.step, (int, np.integer)) or self.step < 1:
            raise UserError(f"Insertion and deletion need a step of at least 1 pixel (not {str(self.step)[:40]}).")
        if self.step > MAX_STEP:
            raise UserError(f"Insertion and deletion take at most {MAX_STEP:,} pixels a step, more than any image "
                            f"holds (not {str(self.step)[:40]}).")
        if self.deletion_baseline not in DELETION_BASELINES:
            raise UserError(f"Deletion replaces pixels with zeros or blur, not {str(self.deletion_baseline)[:40]!r}.")
        k = self.blur_kernel
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 or k % 2 == 0:
            raise UserError(f"The blur kernel must be an odd number of pixels ≥ 1 (not {k!r}).")
        low, high = BLUR_SIGMA_RANGE
        if not (isinstance(self.blur_sigma, (int, float)) and math.isfinite(self.blur_sigma)
                and low <= self.blur_sigma <= high):
            raise UserError(f"The blur's σ must be between {low:g} and {high:g} pixels (not "
                            f"{str(self.blur_sigma)[:40]}): below, it blurs nothing and its numbers overflow; above, "
                            "it is wider than any image.")

    def describe(self) -> str:
        """One sentence for tables, pages and reports."""
        baseline = ("zeros of the normalised input" if self.deletion_baseline == "zeros"
                    else "the blurred image")
        name = self.name
        for key, shown in PROTOCOL_NAMES.items():  # as the papers write them: RISE, CoIBA
            name = name.replace(key, shown)
        return (f"Protocol {name}: {self.step:,} pixels a step, deletion to {baseline}, insertion from a "
                f"Gaussian blur of the normalised input ({self.blur_kernel} × {self.blur_kernel}, "
                f"σ {self.blur_sigma:g}); score p(target), area by the normalised trapezoid.")

    def identity(self) -> str:
        """Compact text for result keys: every number that changes a result (not the name)."""
        return (f"step={self.step}|del={self.deletion_baseline}|"
                f"blur={self.blur_kernel}/{self.blur_sigma:g}")


RISE = PixelProtocol()
#: CoIBA's evaluation (1,792 pixels a step, blur 51 × 51 with σ 50, deletion to the blur).
COIBA = PixelProtocol("coiba", 1792, "blur", 51, 50.0)
PROTOCOLS: dict[str, PixelProtocol] = {"rise": RISE, "coiba": COIBA}


def protocol_from(name: str = "rise", *, step: int | None = None, deletion_baseline: str | None = None,
                  blur_kernel: int | None = None, blur_sigma: float | None = None) -> PixelProtocol:
    """A named protocol with some numbers changed; its name becomes "NAME, modified" when any differs."""
    if name not in PROTOCOLS:
        raise UserError(f"Unknown insertion/deletion protocol {str(name)[:40]!r}; choose one of: "
                        f"{', '.join(PROTOCOLS)}.")
    base = PROTOCOLS[name]
    changed = {k: v for k, v in dict(step=step, deletion_baseline=deletion_baseline, blur_kernel=blur_kernel,
                                     blur_sigma=blur_sigma).items() if v is not None}
    fields = {**asdict(base), **changed}
    if any(fields[k] != getattr(base, k) for k in changed):
        fields["name"] = f"{base.name}, modified"
    return PixelProtocol(**fields)


def auc(curve: Iterable[float]) -> float:
    """RISE's area under a curve of n evenly spaced points on [0, 1]: (Σ − a₀/2 − aₙ₋₁/2)/(n − 1)."""
    a = np.asarray(list(curve) if not isinstance(curve, np.ndarray) else curve, dtype=np.float64)
    if a.size < 2:
        return float("nan")
    return float((a.sum() - a[0] / 2 - a[-1] / 2) / (a.size - 1))


@dataclass
class InsertionDeletionCurves:
    """p(target) of one image at each step of insertion and deletion, for one map and one protocol."""

    fraction: np.ndarray  # share of pixels inserted / deleted at each point, 0 … 1
    insertion: np.ndarray | None
    deletion: np.ndarray | None
    target: int
    protocol: PixelProtocol

    @property
    def insertion_auc(self) -> float:
        """Area under the insertion curve (higher is better); NaN when not measured."""
        return float("nan") if self.insertion is None else auc(self.insertion)

    @property
    def deletion_auc(self) -> float:
        """Area under the deletion curve (lower is better); NaN when not measured."""
        return float("nan") if self.deletion is None else auc(self.deletion)

    def to_record(self) -> dict:
        def curve(c: np.ndarray | None):
            return None if c is None else np.round(c, 7).tolist()

        return {
            "fraction": np.round(self.fraction, 7).tolist(),
            "insertion": curve(self.insertion),
            "deletion": curve(self.deletion),
            "target": int(self.target),
            "protocol": asdict(self.protocol),
            "insertion_auc": self.insertion_auc,
            "deletion_auc": self.deletion_auc,
        }

    @classmethod
    def from_record(cls, r: dict) -> "InsertionDeletionCurves":
        def curve(key: str) -> np.ndarray | None:
            return None if r.get(key) is None else np.asarray(r[key], dtype=np.float64)

        return cls(
            fraction=np.asarray(r["fraction"], dtype=np.float64),
            insertion=curve(INSERTION),
            deletion=curve(DELETION),
            target=int(r.get("target", -1)),
            protocol=PixelProtocol(**r["protocol"]),
        )


def step_counts(pixels: int, step: int) -> np.ndarray:
    """Pixels changed at each point: 0, step, 2·step, …, all (the last step may be shorter)."""
    return np.minimum(np.arange(-(-pixels // step) + 1) * step, pixels)


def check_on_crop(protocol: PixelProtocol, height: int, width: int) -> None:
    """Refuse a protocol that cannot work on a `height` × `width` crop, naming the setting, before any image: a blur
    kernel whose half reaches across the crop (the blur's reflected border needs less than a side; every image
    would fail), or a step of more pixels than the crop holds (the curve would have only its two ends)."""
    k, side = protocol.blur_kernel, min(int(height), int(width))
    if k // 2 >= side:
        largest = 2 * side - 1
        raise UserError(f"A {k} × {k} blur kernel is too wide for the network's {height} × {width} crop: its half "
                        f"must be shorter than a side, so {largest} pixels at most.",
                        cli_hint=f"Give --blur-kernel {largest} or less.",
                        app_hint=f"Choose a blur kernel of {largest} pixels or less.")
    pixels = int(height) * int(width)
    if protocol.step > pixels:
        raise UserError(f"A step of {protocol.step:,} pixels is more than the network's {height} × {width} crop holds "
                        f"({pixels:,} pixels).", cli_hint=f"Give --step {pixels} or less.",
                        app_hint=f"Choose {pixels:,} pixels per step or fewer.")


def blurred(x: torch.Tensor, protocol: PixelProtocol) -> torch.Tensor:
    """The protocol's Gaussian blur of the (normalised) input x (1, C, H, W)."""
    from torchvision.transforms.functional import gaussian_blur

    k = protocol.blur_kernel
    if k // 2 >= min(x.shape[-2:]):  # the same refusal as `check_on_crop`'s, for a caller that did not check
        raise UserError(f"A {k} × {k} blur needs an image larger than {k // 2} pixels a side "
                        f"(this one is {x.shape[-2]} × {x.shape[-1]}).")
    return gaussian_blur(x.float(), [k, k], [float(protocol.blur_sigma)] * 2).to(x.dtype)


def insertion_deletion(
    model: nn.Module,
    x: torch.Tensor,
    attribution,
    target: int,
    protocol: PixelProtocol = RISE,
    *,
    head: str = "softmax",
    which: Sequence[str] = (INSERTION, DELETION),
    batch_size: int = 64,
    seed: int = 0,
    progress: ProgressFn | None = None,
) -> InsertionDeletionCurves:
    """Insertion and/or deletion curves of one image.

    model: maps (B, C, H, W) to logits. x: one preprocessed image (1, C, H, W), on the model's device.
    attribution: an (H, W) map, or a function (x, target) → map. which: the curves to measure.
    The perturbed images are built tensor-wise, `batch_size` at a time, and run through `model` in those
    batches (`batched_logits`); `progress(done, total, label)` after each batch.
    """
    which = tuple(dict.fromkeys(which))
    if not which or any(w not in (INSERTION, DELETION) for w in which):
        raise UserError(f"Measure insertion, deletion or both (not {', '.join(map(str, which)) or 'nothing'}).")
    if batch_size < 1:
        raise UserError(f"The batch size must be at least 1 (not {batch_size}).")
    if x.dim() == 3:
        x = x[None]
    x = x.detach()
    values = resolve_map(attribution, x, target)
    h, w = values.shape
    rank_map = _rank_map(values, seed).to(x.device)
    counts = step_counts(h * w, protocol.step)
    blur = blurred(x, protocol)
    # A deletion step is x with its first k pixels set to the baseline; an insertion step is the blur with
    # its first k pixels taken from x: both are `degrade` of a start image by the rank map.
    starts = {DELETION: (x, torch.zeros_like(x[0]) if protocol.deletion_baseline == "zeros" else blur[0]),
              INSERTION: (blur, x[0])}
    jobs = [(kind, int(k)) for kind in which for k in counts]
    p = _step_probabilities(model, jobs, which, starts, rank_map, target, head, batch_size, progress)
    curves = {kind: p[i * len(counts):(i + 1) * len(counts)] for i, kind in enumerate(which)}
    return InsertionDeletionCurves(
        fraction=counts / float(h * w), insertion=curves.get(INSERTION), deletion=curves.get(DELETION),
        target=int(target), protocol=protocol,
    )


def _rank_map(values: np.ndarray, seed: int) -> torch.Tensor:
    """Each pixel's place in the map's order (`pixel_order`), as an (H, W) map: 0 for the first pixel moved."""
    h, w = values.shape
    rank = np.empty(h * w, dtype=np.int64)
    rank[pixel_order(values, seed)] = np.arange(h * w)
    return torch.from_numpy(rank.reshape(h, w))


def _step_probabilities(model: nn.Module, jobs: list[tuple[str, int]], which: Sequence[str], starts: dict,
                        rank_map: torch.Tensor, target: int, head: str, batch_size: int,
                        progress: ProgressFn | None) -> np.ndarray:
    """p(target) of every (curve, k) step in `jobs`, the perturbed images built and run `batch_size` at a time."""
    total = len(jobs)
    probs: list[torch.Tensor] = []
    for begin in range(0, total, batch_size):
        chunk = jobs[begin:begin + batch_size]
        parts = []
        for kind in which:
            ks = [k for c, k in chunk if c == kind]
            if ks:
                start, fill = starts[kind]
                parts.append(degrade(start, rank_map, ks, fill))
        logits = batched_logits(model, [torch.cat(parts)], batch_size)
        probs.append(probabilities(logits.double(), head)[:, target])
        if progress is not None:
            progress(begin + len(chunk), total, chunk[-1][0])
    return torch.cat(probs).numpy()


# --------------------------------------------------------------------------------------------
# Records → table.

_COLUMNS = {INSERTION: "insertion AUC (higher is better)", DELETION: "deletion AUC (lower is better)"}


def format_table(records: Sequence[dict]) -> str:
    """Per method (and setting, when there are several): mean insertion / deletion AUC and the image count;
    the protocols' sentences under the table."""
    from .results import markdown_table

    records = [r for r in records if r.get("metric") in (INSERTION, DELETION) and r.get("protocol")]
    measures = [m for m in (INSERTION, DELETION) if any(r.get(m) is not None for r in records)]
    settings = list(dict.fromkeys(r.get("setting", "") for r in records))
    labels = {}
    for s in settings:
        r = next(r for r in records if r.get("setting", "") == s)
        labels[s] = f"{r.get('model', '')} {r['protocol'].get('name', '')}".strip()
    several = len(settings) > 1
    rows = []
    for (method, setting), rs in group_records(records, "method", "setting").items():
        curves = [InsertionDeletionCurves.from_record(r) for r in rs]
        row: list = [method_label(records, method)] + ([labels[setting]] if several else [])
        counts = []
        for m in measures:
            areas = [getattr(c, f"{m}_auc") for c in curves if getattr(c, m) is not None]
            row.append(float(np.mean(areas)) if areas else None)
            counts.append(len(areas))
        rows.append(row + [max(counts, default=0)])
    header = ["Method", *(["setting"] if several else []), *(_COLUMNS[m] for m in measures), "images"]
    done = {INSERTION: "inserted", DELETION: "deleted"}
    title = " and ".join(measures).capitalize() or "Insertion and deletion"
    verb = " / ".join(done[m] for m in measures) or "changed"
    protocols = dict.fromkeys(PixelProtocol(**r["protocol"]).describe() for r in records)
    return (f"### {title}: area under p(target) as pixels are {verb}, most relevant first\n\n"
            + markdown_table(header, rows) + "\n\n" + "\n".join(protocols) + "\n")
