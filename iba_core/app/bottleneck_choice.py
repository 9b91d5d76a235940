"""The Per-Sample page's choice of bottleneck (the paper's one layer, CoIBA over a layer range, M2IB for a CLIP
model): what is offered, each one's defaults as its authors run it, and the words a CoIBA run's pictures carry."""
from __future__ import annotations

from iba_core.networks import Network
from iba_core.networks.clip_models import is_clip

#: The choices by key, as the page names them: the paper's one-layer bottleneck, CoIBA over a range of layers, M2IB.
BOTTLENECKS = {"per_sample": "Per-Sample (one layer)", "coiba": "CoIBA (a layer range)",
               "m2ib": "M2IB (its authors' setting)"}
#: Offered for CLIP models only: M2IB explains image–text similarity.
CLIP_ONLY = ("m2ib",)


def offered_bottlenecks(network: Network) -> list[str]:
    """The keys of BOTTLENECKS offered for `network` (M2IB for a CLIP model only), in BOTTLENECKS' order."""
    return [key for key in BOTTLENECKS if key not in CLIP_ONLY or is_clip(network)]


def bottleneck_help(offered: list[str]) -> str:
    """The choice's help: what each offered bottleneck does (M2IB's sentence only where it is offered)."""
    return ("Per-Sample: the paper's bottleneck at one layer. CoIBA (Hong et al., CVPR 2025): one mask, shared by "
            "bottlenecks at every layer from the first to the last of a range, each adding noise with its own layer's "
            "statistics; its information is counted at the first layer, so the bits map is that layer's."
            + (" M2IB (Wang et al., NeurIPS 2023) as its authors run it: a standard-normal prior on the raw features "
               "(no statistics), β·k 0.1, no smoothing, the map of the last forward pass." if len(offered) > 2 else ""))


def m2ib_defaults():
    """M2IB's settings as its authors run it (`methods.bottlenecks.M2IB`: the standard-normal prior, β·k 0.1)."""
    from iba_core.methods import get_method

    return get_method("m2ib").bottleneck_settings()


def coiba_defaults():
    """CoIBA's settings as its authors run it (`coiba.CoIBASettings`: no smoothing of the mask)."""
    from iba_core.coiba import CoIBASettings

    return CoIBASettings()


def coiba_caption(layers: tuple[str, ...]) -> str:
    """What a CoIBA run's pictures show, for the live view and the replay; what its bits bound follows the placement
    (at the attention branches' inputs the residual stream stays clean, so they bound only what passes there)."""
    from iba_core.coiba import block_of

    named = " → ".join(layers) if len(layers) <= 4 else f"{layers[0]} … {layers[-1]}"
    shared = ("one λ, shared by the bottlenecks of every one of them (each adds noise with its own layer's "
              f"statistics), drawn on {layers[0]}'s grid; the bits are counted at {layers[0]}")
    if block_of(layers[0]) != layers[0]:  # the authors' placement: each block's attention-branch input
        return (f"CoIBA at the attention-branch inputs of {len(layers)} blocks, {named}: {shared}. The blocks' "
                "residual stream stays clean, so these bits bound what passes the branches, not all that reaches "
                "the prediction.")
    return f"CoIBA at {len(layers)} layers, {named}: {shared}, an upper bound for the deeper layers."


def shared_lambda_title(layers: tuple[str, ...]) -> str | None:
    """The λ picture's title for a CoIBA run: its one mask serves every layer of the range (not "mean over
    channels": a location's λ is the same in every channel); None for the one-layer bottleneck's own title."""
    return f"λ (shared by {len(layers)} layers)" if layers else None
