"""The model-size cap: every network is built on the meta device first, counted, and refused above the cap
before a byte of it is allocated.

A visitor's model folder, card or timm name decides how much memory the shared server process allocates: each size
in a config is bounded (`card_format.check_builder_args`), but not their product (a ViT config with hidden_size 16384,
48 layers and intermediate_size 65536 holds 155 B parameters, 620 GB in fp32). So `check_size` builds the
architecture on the meta device (shapes only: no memory, no arithmetic; `on_meta`), counts

- its parameters and buffers, and
- where the input size is known, its activations at batch 1: a meta forward pass summing the outputs of its leaf
  modules. That is a lower bound (what a model computes outside modules, e.g. attention scores in a functional
  call, is not counted) but an honest one, and it catches a small network asked for huge inputs (a config's
  image_size of 100,000 px);

and refuses either above `settings.max_params()` (IBA_MAX_PARAMS, default 700 M) with one sentence naming the count
and the setting. `build_seeded`, the one way every source builds a network, does this first, and checks a weights
file's names and shapes against the meta build (read from the file's header, no data: `state_files.peek_state`)
before the real build. A transformers config is checked before that by a lower bound read from config.json alone
(`config_floor`), so a visitor's 155 B config is refused in a blink, before transformers is even imported.

Where the meta build fails (a builder that needs real tensors while building, e.g. torchvision's RegNets compute
their widths with tensors) nothing is counted and the network is built as before: such builders are fixed, named
architectures (torchvision's list, whose largest has 645 M parameters), not sizes a visitor writes. A meta forward
that fails (an operation without a meta kernel) leaves the activations uncounted: the cap is then on parameters.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..errors import UserError
from ..settings import MAX_PARAMS_ENV, max_params
from ..trust import shown
from .state_files import check_state, peek_state

class ModelTooLargeError(UserError):
    """A network above the model-size cap (`settings.max_params`), refused before it is built."""


@dataclass(frozen=True)
class ModelSize:
    """What a network holds: parameters and buffers, and the activations of one image (None: not counted)."""

    params: int
    activations: int | None = None


def on_meta(build: Callable[[], nn.Module]) -> nn.Module | None:
    """`build()` on the meta device (no memory, the global RNG untouched), or None when it cannot build there."""
    try:
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]), torch.device("meta"):
            warnings.simplefilter("ignore")  # builders' notes on initialisation: nothing a user should see here
            model = build()
    except Exception:  # noqa: BLE001 - a builder that needs real tensors while building is built for real
        return None
    return model if isinstance(model, nn.Module) else None


def parameter_count(model: nn.Module) -> int:
    """Numbers the model holds: its parameters and buffers (each shared tensor once)."""
    seen = {id(t): t.numel() for t in (*model.parameters(), *model.buffers())}
    return sum(seen.values())


def activation_count(model: nn.Module, input_size: int, channels: int = 3) -> int | None:
    """Numbers the leaf modules of a meta-built `model` output for one image of `input_size`² px (a lower bound of
    what a forward pass holds for the backward one), or None when the meta forward fails. Modules that hand their
    input on (Identity, Dropout in eval) add nothing."""
    total = 0

    def count(_module, inputs, output) -> None:
        nonlocal total
        outputs = output if isinstance(output, (tuple, list)) else (output,)
        for out in outputs:
            if isinstance(out, torch.Tensor) and not any(out is i for i in inputs):
                total += out.numel()

    leaves = [m for m in model.modules() if next(m.children(), None) is None]
    handles = [m.register_forward_hook(count) for m in leaves]
    was_training = model.training
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.eval()(torch.empty(1, channels, input_size, input_size, device="meta"))
    except Exception:  # noqa: BLE001 - an operation without a meta kernel: the cap is then on parameters
        return None
    finally:
        for handle in handles:
            handle.remove()  # hooks always removed, also when the forward fails
        model.train(was_training)
    return total


def measure(model: nn.Module, input_size: int | None = None, channels: int = 3) -> ModelSize:
    """The size of a meta-built model (`parameter_count`; `activation_count` where `input_size` is given)."""
    activations = activation_count(model, input_size, channels) if input_size else None
    return ModelSize(parameter_count(model), activations)


def _numbers(n: int) -> str:
    """A count in three figures: 154,644,955,138 as "155 billion", 700,000,000 as "700 million", 3,000 as "3,000"."""
    if n >= 1e9:
        return f"{n / 1e9:.3g} billion"
    return f"{n / 1e6:.3g} million" if n >= 1e6 else f"{n:,}"


def config_floor(config: dict) -> int:
    """Parameters a transformers config.json implies at least, read before transformers is imported (importing it
    takes 5–15 s on a busy 2-core server): each of its num_hidden_layers blocks holds at least one hidden_size ×
    intermediate_size matrix (the MLP's; transformers' encoder blocks hold two, and attention besides). 0 where the
    config does not name all three as numbers."""
    sizes = [config.get(k) for k in ("num_hidden_layers", "hidden_size", "intermediate_size")]
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sizes):
        return 0
    layers, hidden, intermediate = sizes
    return layers * hidden * intermediate


def refuse_if_too_large(size: ModelSize, title: str, *, at_least: bool = False) -> None:
    """One sentence naming the count and the setting when `size` is above the cap; nothing otherwise. at_least:
    the count is a lower bound (`config_floor`)."""
    cap = max_params()
    what = None
    if size.params > cap:
        what = f"holds {'at least ' if at_least else ''}{_numbers(size.params)} parameters"
    elif size.activations is not None and size.activations > cap:
        what = f"computes {_numbers(size.activations)} activations for one image"
    if what is not None:
        raise ModelTooLargeError(
            f"{shown(title)} {what}, more than the {_numbers(cap)} this server builds (setting {MAX_PARAMS_ENV}), "
            "so it is not built.",
            cli_hint=f"To load it anyway on a machine with the memory, set {MAX_PARAMS_ENV} higher.",
            app_hint=f"Choose a smaller network, or ask the app's owner to raise {MAX_PARAMS_ENV}.")


def check_size(build: Callable[[], nn.Module], title: str, *, input_size=None, channels=3) -> nn.Module | None:
    """Build on the meta device and refuse above the cap (`refuse_if_too_large`); the meta model (for a weights
    file's names and shapes), or None when it cannot be built there (then nothing is counted: see the module
    docstring). input_size, channels: the side of the network's input in px and its channels, or functions reading
    them from the meta model (timm's pretrained_cfg, transformers' config name them)."""
    model = on_meta(build)
    if model is None:
        return None
    size = input_size(model) if callable(input_size) else input_size
    refuse_if_too_large(measure(model, size, channels(model) if callable(channels) else channels), title)
    return model


@dataclass(frozen=True)
class WeightsCheck:
    """A weights file to check against an architecture before it is built (`build_seeded`): its path, the class
    list's length and a source finder for the message (`state_files.check_state`), and whether pickles are trusted."""

    path: str | os.PathLike
    classes: int | None = None
    explain: Callable | None = None
    trust_pickle: bool = False

    @classmethod
    def of(cls, weights, trust_pickle: bool = False) -> "WeightsCheck | None":
        """The check of a `weights` argument that names a file; None for "pretrained", "random" or None (nothing of
        the user's to check before the build)."""
        return None if weights in (None, "pretrained", "random") else cls(weights, trust_pickle=trust_pickle)


def build_seeded(make: Callable[[], nn.Module], *, title: str = "This network", input_size=None, channels=3,
                 weights_check: WeightsCheck | None = None) -> nn.Module:
    """`make()` with torch's RNG seeded (random weights are reproducible, so their statistics can be cached) in a
    forked RNG (the process's global RNG is untouched: the app's process serves every browser session).

    First `make()` runs on the meta device: a network above the model-size cap is refused before anything is
    allocated (`check_size`: `title` names it, `input_size` and `channels`, numbers or functions of the
    meta model, give its activations), and the file of `weights_check` has its names and shapes checked against it,
    read from the file's header (`state_files.peek_state`, `check_state`), before the real build.

    Linear layers initialised to zero (ViT classification heads) get small random weights instead: with a zero
    head every logit is 0 whatever the image, every gradient vanishes and random weights could not check any
    method's structure. Loaded weights overwrite them anyway.
    """
    meta_model = check_size(make, title, input_size=input_size, channels=channels)
    if meta_model is not None and weights_check is not None:
        state = peek_state(weights_check.path, trust_pickle=weights_check.trust_pickle)
        if state is not None:
            check_state(meta_model.state_dict(), state, title, classes=weights_check.classes,
                        explain=weights_check.explain)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = make()
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, nn.Linear) and not module.weight.any():
                    module.weight.normal_(0.0, 0.02)
    return model
