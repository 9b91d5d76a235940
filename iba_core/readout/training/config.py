"""The settings of one training run (`TrainConfig`), stored in every training checkpoint."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ...bottleneck import DEFAULT_BETA_K, check_beta_k, check_sigma
from ...errors import UserError, check_range
from ...networks import DEFAULT_NETWORK
from ..config import DEFAULT_HIDDEN

#: Fields a resumed run may change (e.g. more epochs, another output folder, a moved image folder);
#: the others (lr, batch size, β, layers, …) cannot change mid-run.
RESUME_OVERRIDABLE = ("epochs", "device", "workers", "out", "save_every", "max_steps", "preview", "images",
                      "class_map", "weights", "log_every")


#: Ranges of the training settings (paper §4.1: Adam, lr 1e-5, batch 16, 10–20 epochs): wide, but finite.
EPOCHS_RANGE = (1, 100_000)
BATCH_SIZE_RANGE = (1, 4096)
TRAIN_LR_RANGE = (1e-9, 1.0)  # the readout's weights; above 1 Adam makes them jump


@dataclass
class TrainConfig:
    """Everything a training run depends on (stored in each checkpoint)."""

    model: str = DEFAULT_NETWORK
    weights: str = "pretrained"  # "pretrained", "random" or a state-dict file
    device: str = "cpu"
    images: str | None = None  # image folder; None: the offline sample photos
    sample_photos: int = 0  # crops of the sample photos per epoch (when images is None)
    extra_photos: bool = False  # with sample_photos: also the other offline photos (offline_photos)
    repeats: int = 1  # augmented crops per folder image and epoch
    labels: str = "auto"  # "auto" | "folders" | "top1"
    class_map: str | None = None
    layer: str | None = None  # bottleneck layer (default: the network's readout layer)
    reads: tuple[str, ...] | None = None  # read-out layers (default: the network spec's, spec.reads())
    hidden: tuple[int, int] = DEFAULT_HIDDEN
    epochs: int = 20  # paper §4.1: E = 20 (its appendix table says 10)
    batch_size: int = 16  # paper: 16
    lr: float = 1e-5  # paper: 1e-5
    beta_k: float = DEFAULT_BETA_K  # paper: β = 10/k
    sigma: float = 1.0  # paper: σ_s = 1
    seed: int = 0
    stats_n: int = 1000  # images for the feature statistics
    workers: int = 0
    out: str = "readout_runs"
    save_every: int = 0  # also checkpoint every N steps within an epoch (0: only at epoch ends)
    max_steps: int = 0  # stop each epoch after N steps (0: whole epoch); for quick trials
    log_every: int = 10  # steps per entry of the loss curve kept in the checkpoint
    preview: str | None = None  # image for the per-epoch preview (default: first image / chelsea)

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in known}
        return cls(**kw)

    def __post_init__(self) -> None:
        self.check_ranges()  # at construction; `validate` (before a run) also checks how the fields fit together

    def check_ranges(self) -> "TrainConfig":
        """A UserError naming the range for a setting outside it (β·k and σ_s as for every bottleneck)."""
        check_range("The number of epochs", self.epochs, *EPOCHS_RANGE, integer=True)
        check_range("The batch size", self.batch_size, *BATCH_SIZE_RANGE, integer=True)
        check_range("The learning rate", self.lr, *TRAIN_LR_RANGE)
        check_beta_k(self.beta_k)
        check_sigma(self.sigma)
        return self

    def validate(self) -> "TrainConfig":
        """Every check, before a run: the ranges, the image source, labels and counts."""
        self.check_ranges()
        if self.images is None and self.sample_photos < 1:
            raise UserError("Give an image folder, or a number of sample-photo crops per epoch.")
        if self.labels not in ("auto", "folders", "top1"):
            raise UserError(f"labels must be auto, folders or top1, got {self.labels!r}.")
        if self.stats_n < 1 or self.repeats < 1 or self.workers < 0:
            raise UserError("stats_n and repeats must be ≥ 1, workers ≥ 0.")
        return self

    def resumed(self, saved: "TrainConfig", overrides: list[str] | tuple[str, ...] | None = None) -> "TrainConfig":
        """`saved` (a checkpoint's configuration) with the fields `overrides` names taken from self.

        overrides None: the fields of self that differ from the defaults. Only RESUME_OVERRIDABLE
        fields can change; a different value for any other is ignored with a warning.
        """
        import warnings

        if overrides is None:
            defaults = TrainConfig()
            overrides = [f.name for f in fields(TrainConfig) if getattr(self, f.name) != getattr(defaults, f.name)]
        for name in overrides:
            if name in RESUME_OVERRIDABLE:
                setattr(saved, name, getattr(self, name))
            elif getattr(self, name) != getattr(saved, name):
                warnings.warn(f"Resuming keeps the checkpoint's {name}={getattr(saved, name)!r}; "
                              f"{getattr(self, name)!r} is ignored.", stacklevel=3)
        return saved
