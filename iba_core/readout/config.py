"""What defines a Readout Bottleneck (`ReadoutConfig`, stored in checkpoints) and its checks.

The configuration names the analysed network, its weights and the layers the readout uses, so a
checkpoint is checked against a network before it is used (`check_compatible`); a readout only
explains the network and weights it was trained on.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ..bottleneck import DEFAULT_BETA_K, INIT_ALPHA, MIN_STD, check_beta_k, check_sigma
from ..errors import UserError
from ..networks import LOGITS, REGISTRY

#: α is kept in [-ALPHA_MAX, ALPHA_MAX] by a tanh scaling (see `iba_core.readout.network`).
ALPHA_MAX = 10.0
#: Widths of the two hidden 1×1 convolutions (the paper does not give them; kept modest so the
#: checkpoint stays small and a heatmap costs little more than one forward pass).
DEFAULT_HIDDEN = (128, 64)


class ReadoutCheckpointError(UserError):
    """A readout checkpoint that is missing, unreadable, or made for another network/weights/layer.

    str(err) is one sentence saying what is wrong; its hints say what to do on the command line and in the app.
    """


#: What to do about a missing or unfitting checkpoint in the app: the Compare page's readout menu and notes.
APP_CHECKPOINT_HINT = ("Choose a checkpoint made for {title} in the Compare page's Readout Bottleneck menu; its "
                       "“Readout Bottleneck checkpoints” section says how to train one.")


def readout_cli_hint(network, verb: str = "Train") -> str:
    """The CLI's way to a checkpoint for `network`: the training command, then --readout."""
    return (f"{verb} one with `python -m iba_core train-readout --model {network.key} --images DIR` and pass it "
            "with --readout CKPT.")


@dataclass(frozen=True)
class ReadoutConfig:
    """Everything that defines a Readout Bottleneck's shape and behaviour (stored in checkpoints)."""

    model: str  # registry key of the analysed network
    weights_id: str  # Network.weights_id the readout was trained for
    layer: str  # bottleneck layer
    reads: tuple[str, ...]  # read-out layers, LOGITS for the logits
    feature_shape: tuple[int, int, int]  # (C, h, w) of the bottleneck layer at input_size
    read_channels: tuple[int, ...]  # channels of each read-out layer
    input_size: tuple[int, int] = (224, 224)
    hidden: tuple[int, int] = DEFAULT_HIDDEN
    sigma: float = 1.0  # σ_s of the mask smoothing (paper: 1)
    beta_k: float = DEFAULT_BETA_K  # β·k (paper: β = 10/k)
    init_alpha: float = INIT_ALPHA
    alpha_max: float = ALPHA_MAX
    min_std: float = MIN_STD

    def __post_init__(self) -> None:
        # the settings it shares with the Per-Sample Bottleneck, with the same ranges (σ_s: within the map)
        check_beta_k(self.beta_k)
        check_sigma(self.sigma, tuple(self.feature_shape[1:]))

    @property
    def k(self) -> int:
        """k = c·h·w, the number of bottleneck elements (β = beta_k / k)."""
        c, h, w = self.feature_shape
        return c * h * w

    @property
    def beta(self) -> float:
        return self.beta_k / self.k

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict) -> "ReadoutConfig":
        known = {f.name for f in fields(cls)}
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in known}
        return cls(**kwargs)


def check_compatible(config: ReadoutConfig, network) -> None:
    """Raise ReadoutCheckpointError unless `config` was made for this network, weights and layers."""
    if config.model != network.key:
        trained_for = REGISTRY[config.model].title if config.model in REGISTRY else config.model
        raise ReadoutCheckpointError(
            f"This readout checkpoint was trained for the network {trained_for}, but the loaded network is "
            f"{network.spec.title}.",
            cli_hint=readout_cli_hint(network, "Use a checkpoint made for it, or train"),
            app_hint=APP_CHECKPOINT_HINT.format(title=network.spec.title),
        )
    if config.weights_id != network.weights_id:
        raise ReadoutCheckpointError(
            f"This readout checkpoint was trained for {config.model} with weights {config.weights_id!r}, but the "
            f"loaded network has weights {network.weights_id!r}; a readout only explains the weights it was "
            f"trained on."
        )
    names = set(network.spec.layers) | {LOGITS}
    missing = [n for n in (config.layer, *config.reads) if n not in names]
    if missing:
        raise ReadoutCheckpointError(
            f"This readout checkpoint uses layers {', '.join(missing)}, which {network.spec.title} does not have."
        )
