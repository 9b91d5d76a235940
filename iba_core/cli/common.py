"""What every CLI command shares: network arguments, loading, progress bars, error handling, JSON output."""
from __future__ import annotations

import argparse
import json
import re
import sys
import traceback
from typing import Any, Callable

from ..errors import CLI_LOG_PLACE, UserError, internal_message, quoted, user_message
from ..networks import DEFAULT_NETWORK, REGISTRY

#: Exit statuses: a user's mistake (EXIT_FAILED) and a bug (EXIT_INTERNAL, sysexits' EX_SOFTWARE) apart, so a
#: script can tell "fix your input" from "report this".
EXIT_OK, EXIT_FAILED, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 70, 130


def add_network_args(p: argparse.ArgumentParser, *, layer: bool = True, model_default: str | None = DEFAULT_NETWORK,
                     device_default: str | None = "cpu") -> None:
    """--model, --layer, --weights, --random-weights, --trust-pickle, --trust-code, --device."""
    p.add_argument("--model", default=model_default, type=model_arg, metavar="MODEL",
                   help=f"network: a registered key ({', '.join(REGISTRY)}), torchvision:NAME (any torchvision "
                   f"classifier), timm:NAME (any timm model), hf:ORG/NAME (a Hugging Face image classifier), a model "
                   f"folder (timm's save_for_hf or transformers' save_pretrained) or a model card file (.toml) "
                   f"(default: {DEFAULT_NETWORK})")
    if layer:
        p.add_argument("--layer", default=None, help="layer name (default: the network's default layer)")
    p.add_argument("--weights", default=None, help="local weights file (state dict: .pth, .pt or .safetensors), or "
                   "'random'")
    p.add_argument("--random-weights", action="store_true", help="untrained weights (for structure/speed tests)")
    p.add_argument("--trust-pickle", action="store_true",
                   help="allow a weights file that is a pickled whole model (runs code from the file: only for "
                   "files you made yourself; the app never does this)")
    p.add_argument("--trust-code", action="store_true",
                   help="allow a model card's Python code (an arch \"package.module:function\" builder, or a module "
                   "beside the card: runs code from the card's author, only for cards you trust) and its paths "
                   "outside the card's folder, and a Hugging Face model's own code (trust_remote_code)")
    p.add_argument("--device", default=device_default, help="torch device, e.g. cpu or cuda (default: cpu)")


#: A value longer than 60 characters as argparse quotes it whole in a refusal ("invalid int value: '…'", "invalid
#: choice: '…'"; repr's quotes, single or double); only there, so an apostrophe in a sentence ("timm's") is never
#: taken for a quote.
_LONG_QUOTE = re.compile(r"""((?:value|choice): )(['"])((?:(?!\2)[^\\]|\\.){57})(?:(?!\2)[^\\]|\\.){4,}\2""")


class Parser(argparse.ArgumentParser):
    """The commands' parser: argparse's, but a refused value is quoted shortened, not whole (an option's
    choices or type refusal would repeat a pasted page on the error line)."""

    def error(self, message: str):  # type: ignore[override]
        super().error(_LONG_QUOTE.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}…{m.group(2)}", message))


def model_arg(text: str) -> str:
    """--model's check: a registered key, torchvision:NAME, timm:NAME, hf:ORG/NAME, a model folder or an existing
    .toml card (argparse error otherwise)."""
    from ..networks import check_network_key

    try:
        return check_network_key(text)
    except UserError as err:
        raise argparse.ArgumentTypeError(err.message) from None


def positive_int(text: str) -> int:
    """argparse type: a whole number ≥ 1 (--limit, --batch-size, …)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {quoted(text)}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {quoted(text)}")
    return value


def whole_number(text: str) -> int:
    """argparse type: a whole number of any sign, the metrics check its range (argparse's own `int` repeats a
    refused value whole: 5,000 digits on one line)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {quoted(text)}") from None


def real_number(text: str) -> float:
    """argparse type: a number (NaN and ±inf too: the metrics refuse them with their range), its echo cut."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {quoted(text)}") from None


#: One line on CoIBA for every command's --help (the method itself: iba_core.coiba).
COIBA_HELP = ("coiba: CoIBA (Hong et al., CVPR 2025), one mask shared by bottlenecks at every layer from FIRST to "
              "LAST, its information counted at FIRST")


def layer_range_arg(text: str) -> tuple[str, str]:
    """argparse type of --layer-range: "FIRST:LAST" → (first, last), two layer names as `models` lists them (the
    network checks that they exist and run in that order once it is loaded: `coiba.layer_range`)."""
    from ..coiba import parse_range

    try:
        return parse_range(text)
    except UserError as err:
        raise argparse.ArgumentTypeError(err.message) from None


def add_layer_range_arg(p: argparse.ArgumentParser) -> None:
    """--layer-range FIRST:LAST, CoIBA's layers: one parser for `attribute`, `compare`, `evaluate` and folder
    runs (`layer_range_settings` hands it to the methods that take a range)."""
    p.add_argument("--layer-range", type=layer_range_arg, default=None, metavar="FIRST:LAST",
                   help=f"{COIBA_HELP}: its first and last layer, names as `models` lists them (default: the "
                   "network's default layer to the last layer before the head)")


#: --methods' word for every registered method (those that cannot run on the network are then left out).
ALL_METHODS = "all"


def add_methods_arg(p: Any, text: str, default: list[str] | None = None) -> None:
    """--methods KEY … on a parser or an argument group, one form for `compare`, `evaluate` and folder runs: keys
    separated by spaces, commas or both ("a b", "a,b", "a, b"), or "all"; `method_keys_arg` reads it. text: the
    command's help."""
    p.add_argument("--methods", nargs="+", default=default, metavar="KEY",
                   help=text + " (keys separated by spaces or commas)")


def method_keys_arg(values: str | list[str] | None) -> list[str] | None:
    """The method keys --methods names, read the one way for every command: each argument split at commas, blanks
    dropped, each key once in its first place; "all" stays a word (`names_all`). None when --methods is left out;
    a UserError when it names no key (e.g. `--methods ,`)."""
    if values is None:
        return None
    texts = [values] if isinstance(values, str) else list(values)
    keys = list(dict.fromkeys(key.strip() for text in texts for key in text.split(",") if key.strip()))
    if not keys:
        raise UserError("--methods names no method.", cli_hint=f"Give method keys, e.g. --methods saliency,grad_cam "
                        f"(or {ALL_METHODS}).")
    return keys


def names_all(keys: list[str] | None) -> bool:
    """Whether --methods asks for every method that can run on the network ("all" among its keys)."""
    return keys is not None and ALL_METHODS in keys


def runnable(methods: list, network) -> list:
    """The methods of `methods` that can run on `network`, for `--methods all`: the others are named on stderr with
    the sentence their `available_for` gives, as the app's forms list them (`app.choices.unavailable_text`), so
    "all" leaves none out unsaid."""
    from ..app.choices import MethodChoices, unavailable_text

    choices = MethodChoices()
    for method in methods:
        reason = method.available_for(network)
        if reason:
            choices.unavailable[method.key] = reason
        else:
            choices.keys.append(method.key)
    note = unavailable_text(choices, {m.key: m.name for m in methods})
    if note:
        print(f"note: {note}", file=sys.stderr)
    return [m for m in methods if m.key in choices.keys]


def check_layer_range(args: argparse.Namespace) -> None:
    """A --layer-range with a layer name the network (a registered one, known before it loads) does not have: a
    UserError naming it; reversed or unsuitable ranges are refused by `coiba.layer_range` once it is loaded."""
    from ..networks import get_spec

    layer_range = getattr(args, "layer_range", None)
    if layer_range is None or getattr(args, "model", None) not in REGISTRY:
        return
    spec = get_spec(args.model)
    for name in layer_range:
        spec.check_layer(name)  # names the closest layers


def layer_settings(method, layer: str | None, layer_range: tuple[str, str] | None) -> dict:
    """The layer options a method takes: --layer for a one-layer bottleneck (its "layer" setting), --layer-range
    for CoIBA ("layers"); nothing for the others."""
    defaults = method.default_settings()
    out: dict = {}
    if layer is not None and "layer" in defaults:
        out["layer"] = layer
    if layer_range is not None and "layers" in defaults:
        out["layers"] = tuple(layer_range)
    return out


def refuse_unused_range(layer_range: tuple[str, str] | None, methods: list) -> None:
    """A UserError when --layer-range is given but no chosen method spans a range of layers (it would be
    ignored): for `attribute FOLDER`, `compare` and `evaluate`."""
    if layer_range is not None and not any("layers" in m.default_settings() for m in methods):
        raise UserError("--layer-range sets CoIBA's layers, but none of the chosen methods is CoIBA.",
                        cli_hint="Add coiba to --methods, or leave out --layer-range.")


def add_yardstick_args(p: argparse.ArgumentParser) -> None:
    """How the field's metrics are measured, one set of options for every command that measures them (`evaluate`,
    a folder run's `--metrics`): --protocol and its numbers (insertion, deletion), --removed and --noise (ROAD),
    --tolerance (pointing). `yardstick_options(args)` reads them into a `metrics.yardsticks.YardstickOptions`."""
    from ..metrics.insertion_deletion import DELETION_BASELINES, PROTOCOLS
    from ..metrics.pointing import POINTING_TOLERANCE
    from ..metrics.road import ROAD_NOISE, ROAD_REMOVED

    # ROAD (Rong et al. 2022)
    p.add_argument("--removed", type=real_number, nargs="+", default=None, metavar="P",
                   help="road: percentages of pixels removed, 0 < P < 100 (default: "
                   f"{' '.join(map(str, ROAD_REMOVED))}; pytorch-grad-cam's percentile is 100 − P)")
    p.add_argument("--noise", type=real_number, default=ROAD_NOISE,
                   help="road: σ of the noise added to the imputed pixels, in the network's normalised input "
                   "(default: %(default)s)")
    # insertion / deletion and pointing
    p.add_argument("--protocol", choices=list(PROTOCOLS), default="rise",
                   help="insertion/deletion: rise (224 pixels a step, deletion to zeros, blur 11 × 11, σ 5; default) "
                        "or coiba (1792 pixels a step, deletion to the blur, blur 51 × 51, σ 50)")
    p.add_argument("--step", type=positive_int, default=None,
                   help="insertion/deletion: pixels a step (default: the protocol's)")
    p.add_argument("--deletion-baseline", choices=DELETION_BASELINES, default=None,
                   help="deletion: replace pixels with zeros of the normalised input or with the blurred image "
                        "(default: the protocol's)")
    p.add_argument("--blur-kernel", type=whole_number, default=None,
                   help="insertion/deletion: the Gaussian blur's kernel, an odd number of pixels (default: the "
                        "protocol's)")
    p.add_argument("--blur-sigma", type=real_number, default=None,
                   help="insertion/deletion: the Gaussian blur's σ in pixels (default: the protocol's)")
    p.add_argument("--tolerance", type=whole_number, default=POINTING_TOLERANCE,
                   help="pointing: a hit when a box pixel lies closer than this many pixels to the map's maximum "
                        "(default: %(default)s, TorchRay's)")


def yardstick_options(args: argparse.Namespace, batch_size: int = 64, seed: int = 0):
    """The `metrics.yardsticks.YardstickOptions` that `add_yardstick_args`' options give, checked (a UserError for
    a value the metrics refuse) before any network loads."""
    from ..errors import UserError
    from ..metrics.insertion_deletion import protocol_from
    from ..metrics.road import ROAD_REMOVED, check_noise, check_removed
    from ..metrics.yardsticks import YardstickOptions

    if args.tolerance < 0:
        raise UserError(f"--tolerance must be 0 pixels or more (not {args.tolerance}).")
    protocol = protocol_from(args.protocol, step=args.step, deletion_baseline=args.deletion_baseline,
                             blur_kernel=args.blur_kernel, blur_sigma=args.blur_sigma)
    return YardstickOptions(protocol=protocol, road_removed=check_removed(args.removed or ROAD_REMOVED),
                            tolerance=args.tolerance, batch_size=batch_size, seed=seed,
                            road_noise=check_noise(args.noise))


def weights_arg(args: argparse.Namespace) -> str:
    return args.weights or ("random" if args.random_weights else "pretrained")


def trust_from_args(args: argparse.Namespace):
    """What the command line allows (`iba_core.trust.Trust.local`): the local user's paths, code from model
    cards only with --trust-code."""
    from ..trust import Trust

    return Trust.local(code=getattr(args, "trust_code", False))


def load_from_args(args: argparse.Namespace, device: str | None = None, weights: str | None = None):
    """The network the arguments name (iba_core.networks.load_network); weights: instead of the arguments'."""
    from ..networks import load_network

    return load_network(args.model, weights=weights or weights_arg(args), device=device or args.device,
                        trust_pickle=getattr(args, "trust_pickle", False), trust=trust_from_args(args))


def progress_bar(desc: str, unit: str = "img") -> tuple[Callable[..., None], Callable[[], None]]:
    """A tqdm bar on stderr driven by progress(done, total[, label]) callbacks; returns (callback, close).

    The bar appears on the first callback only, so work that turns out to be cached prints nothing.
    """
    from tqdm import tqdm

    bars: list = []

    def update(done: int, total: int, label: str | None = None) -> None:
        if not bars:
            bars.append(tqdm(total=total or None, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True))
        bar = bars[0]
        if total and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)
        if label:
            bar.set_postfix_str(label, refresh=True)

    def close() -> None:
        for bar in bars:
            bar.close()

    return update, close


def print_json(record: dict[str, Any]) -> None:
    """One JSON line on stdout."""
    from ..jsonable import jsonable

    print(json.dumps(jsonable(record)), flush=True)


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed subcommand. A user's mistake (`UserError`) becomes one line on stderr (the message and its
    CLI hint), no traceback, exit status EXIT_FAILED; anything else is a bug: its traceback on stderr, then one
    line saying it is an internal error, exit status EXIT_INTERNAL."""
    try:
        return args.func(args)
    except UserError as err:
        print(f"error: {user_message(err, 'cli')}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted (a results file resumes when the same command runs again)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # noqa: BLE001 - a bug: its details for a report, and never the user's fault
        traceback.print_exception(err, file=sys.stderr)
        print(f"error: {internal_message(err, CLI_LOG_PLACE)}", file=sys.stderr)
        return EXIT_INTERNAL


def say_cost(cost) -> None:
    """Print a long request's cost (`budget.cost_note`: above `budget.SAY_ABOVE` network passes) on stderr before it
    starts; the command line refuses nothing (its user owns the machine)."""
    from ..budget import cost_note

    note = cost_note(cost)
    if note:
        print(f"note: {note}", file=sys.stderr)
