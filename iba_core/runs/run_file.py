"""run.json read back as data (issue #40, item 2): its text parsed within a size and a nesting depth
(`parse_run_file`), then every field a reader uses checked with the bounds a run writes it with (`check_info`): the
preprocessing against a model card's ranges, each bottleneck's settings against `BottleneckSettings`, the metrics'
protocol against the metrics' own checks, the prompts against a CLIP model's. An edited, damaged or hostile run file
is a `RunFolderError` in one sentence naming the field ("run.json's preprocess.crop is 6000, where a run writes a
whole number from 16 to 1,024 pixels."), never a traceback, and nothing read from it allocates more than those
bounds allow (a 6000-pixel crop is refused before any image is made). The sentences name run.json, never the
server's path to it.
"""
from __future__ import annotations

import json
from dataclasses import fields
from types import SimpleNamespace
from typing import Any, Callable

from ..errors import UserError, check_range

RUN_FILE = "run.json"
#: Bump when the layout of a run folder changes (an older folder is then refused, not misread).
RUN_FORMAT = 1


class RunFolderError(UserError):
    """A run folder that cannot be used: not a run folder, of another format, made with other settings, or a field of
    its run.json that a run would not write (`store` names it too)."""


#: The largest run.json read: 16 MiB, far above what a run writes (its prompts, at most MAX_PROMPTS of
#: MAX_PROMPT_CHARS, are the largest part: about 300 kB), and the same cap as a class list or a model folder's index.
MAX_RUN_FILE_BYTES = 16 * 2**20
#: The longest text field (a path of the image folder or the box files: PATH_MAX of Linux).
MAX_TEXT_CHARS = 4096
#: At most this many entries in a mapping or a list of run.json (the methods, a method's settings or layers).
MAX_ENTRIES = 4096
#: How deep a method's settings nest: CoIBA's statistics per layer ({"stats": {layer: {"n": …}}}) are the deepest.
MAX_SETTINGS_DEPTH = 3


def parse_run_file(data: bytes) -> dict:
    """run.json's bytes as the dict a run wrote, checked (`check_info`); a RunFolderError in one sentence for a file
    over MAX_RUN_FILE_BYTES (refused before it is parsed), one that is not text or not complete JSON, one nested past
    what the parser takes, another format, or a field a run would not write."""
    if len(data) > MAX_RUN_FILE_BYTES:
        raise RunFolderError(f"The run folder's {RUN_FILE} is {len(data) / 2**20:,.1f} MiB; a run writes at most "
                             f"{MAX_RUN_FILE_BYTES // 2**20} MiB there, so it is not read.")
    try:
        info = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:  # a ValueError: bytes that are no text at all
        raise RunFolderError(f"The run folder's {RUN_FILE} is damaged: it is not text.") from None
    except RecursionError:  # brackets nested thousands deep: the parser's stack, not a mistake of the code
        raise RunFolderError(f"The run folder's {RUN_FILE} nests its brackets deeper than a run writes them, so it "
                             "is not read.") from None
    except ValueError:  # json's JSONDecodeError: a cut-short or edited file; its name means nothing to a user
        raise RunFolderError(f"The run folder's {RUN_FILE} is damaged: it is not complete, valid JSON (cut short or "
                             "edited?).") from None
    return check_info(info)


def check_info(info: object) -> dict:
    """`info` (run.json parsed) when every field a reader uses is as a run writes it, else a RunFolderError in one
    sentence naming the first field that is not."""
    if not isinstance(info, dict):
        raise RunFolderError(f"The run folder's {RUN_FILE} holds {_kind(info)}, where a run writes a mapping of its "
                             "fields.")
    if info.get("format") != RUN_FORMAT:
        raise RunFolderError(f"{RUN_FILE}'s format is {_kind(info.get('format'))}: this version reads run files of "
                             f"format {RUN_FORMAT}.")
    for key in ("network", "weights", "layer"):
        _text(key, info.get(key), optional=True)
    if "source" in info:  # the image folder (a run made before it was recorded reads its images from ".")
        _text("source", info["source"])
    check_preprocess(info.get("preprocess"))
    _check_prompts(info.get("prompts"))
    _check_run_settings(info.get("settings"))
    methods = _mapping("methods", info.get("methods"), "a mapping of method keys to their settings")
    for key, method in methods.items():
        _text(f"methods' key {_shown(key)}", key)
        _check_method(f"methods.{_shown(key)}", method)
    return info


# ---- the sentences ---------------------------------------------------------------------------------------


def _shown(value: object, limit: int = 40) -> str:
    """A value as a sentence quotes it: JSON, cut at `limit` characters (a long text is not echoed whole)."""
    try:
        # text as it is, unless it holds a control character (a line break would split the sentence): escaped
        text = value if isinstance(value, str) and value.isprintable() else json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _kind(value: object) -> str:
    """What a JSON value is, in words: "a list", "text", "a number", …"""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, (int, float)):
        return _shown(value)
    return {dict: "a mapping", list: "a list", str: "text"}.get(type(value), type(value).__name__)


def _wrong(field: str, value: object, expected: str) -> RunFolderError:
    return RunFolderError(f"{RUN_FILE}'s {field} is {_kind(value)}, where a run writes {expected}.")


def _refused(field: str, err: UserError) -> RunFolderError:
    """A writer's refusal (`err`) as a sentence about the run file's field."""
    message = err.message.rstrip(".")
    if len(message) > 240:  # a writer's sentence that quotes a value at length: the field is named already
        message = message[:240].rsplit(" ", 1)[0] + " …"
    if message[1:2].islower():  # "The number of steps …" reads on after the colon; "ROAD's …" keeps its capitals
        message = message[:1].lower() + message[1:]
    return RunFolderError(f"{RUN_FILE}'s {field} is not what a run writes: {message}.")


# ---- the kinds of field -----------------------------------------------------------------------------------


def _text(field: str, value: object, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _wrong(field, value, "text" + (" or null" if optional else ""))
    if len(value) > MAX_TEXT_CHARS:
        raise RunFolderError(f"{RUN_FILE}'s {field} is {len(value):,} characters long; a run writes at most "
                             f"{MAX_TEXT_CHARS:,} there.")
    return value


def _mapping(field: str, value: object, expected: str, optional: bool = False) -> dict:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise _wrong(field, value, expected)
    if len(value) > MAX_ENTRIES:
        raise RunFolderError(f"{RUN_FILE}'s {field} has {len(value):,} entries; a run writes at most "
                             f"{MAX_ENTRIES:,} there.")
    return value


def _list(field: str, value: object, expected: str, limit: int = MAX_ENTRIES) -> list:
    if not isinstance(value, list):
        raise _wrong(field, value, expected)
    if len(value) > limit:
        raise RunFolderError(f"{RUN_FILE}'s {field} has {len(value):,} entries; a run writes at most {limit:,} "
                             "there.")
    return value


def _a_number(field: str, value: object) -> object:
    """A number (not true or false), before a writer's check of its range reads it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong(field, value, "a number")
    return value


def _number(field: str, value: object, low: float, high: float, *, integer: bool = False, unit: str = "") -> None:
    """A number in [low, high] (the writer's range); `check_range` decides, the sentence names the field."""
    try:
        check_range(field, value, low, high, integer=integer)
    except UserError:
        kind, bounds = ("a whole number", f"{int(low):,} to {int(high):,}") if integer else ("a number",
                                                                                         f"{low:g} to {high:g}")
        raise RunFolderError(f"{RUN_FILE}'s {field} is {_kind(value)}, where a run writes {kind} from "
                             f"{bounds}{unit}.") from None


def _plain(field: str, value: object, depth: int) -> None:
    """A setting as a run records it: null, true/false, a number, text, or (`depth` levels at most) a list or
    mapping of them; walked without recursion past `depth`, so no nesting can exhaust the stack."""
    if value is None or isinstance(value, (bool, int, float)):
        return
    if isinstance(value, str):
        _text(field, value)
        return
    if not isinstance(value, (list, dict)) or depth <= 0:
        raise _wrong(field, value, "a plain value (text, a number, or a short list of them)")
    items = value.items() if isinstance(value, dict) else enumerate(value)
    if len(value) > MAX_ENTRIES:
        raise RunFolderError(f"{RUN_FILE}'s {field} has {len(value):,} entries; a run writes at most "
                             f"{MAX_ENTRIES:,} there.")
    for key, item in items:
        _plain(f"{field}.{_shown(key)}", item, depth - 1)


# ---- the fields -------------------------------------------------------------------------------------------


def check_preprocess(preprocess: object) -> None:
    """How the maps lie on the images: resize and crop within a model card's ranges (`card_format`), checked
    before any image is resized or cropped to them; a run checks its network's before it writes them
    (`run_settings.run_identity`), so what it writes it reads back."""
    from ..networks.card_format import CROP_RANGE, RESIZE_RANGE

    preprocess = _mapping("preprocess", preprocess, "a mapping of resize and crop", optional=True)
    for key, (low, high) in (("resize", RESIZE_RANGE), ("crop", CROP_RANGE)):
        if preprocess.get(key) is not None:
            _number(f"preprocess.{key}", preprocess[key], low, high, integer=True, unit=" pixels")


def _check_prompts(prompts: object) -> None:
    """A CLIP run's prompts: at most MAX_PROMPTS, each as `clean_prompt` keeps one."""
    if prompts is None:
        return
    from ..networks.clip_models import MAX_PROMPTS, clean_prompt

    for i, prompt in enumerate(_list("prompts", prompts, "a list of text prompts", MAX_PROMPTS)):
        try:
            if clean_prompt(prompt) != prompt:
                raise UserError("a run keeps each prompt stripped, its spaces single.")
        except UserError as err:
            raise _refused(f"prompts[{i}]", err) from None


def _check_run_settings(settings: object) -> None:
    """The run's settings: the class it explains, its thumbnails' size (what the thumbnails are read into), the
    metrics and their protocol; anything else a plain value (it is only compared on a resume)."""
    from ..networks.card_format import MAX_CLASSES
    from .measures import THUMBNAIL

    settings = _mapping("settings", settings, "a mapping of the run's settings")
    if settings.get("target") is not None:
        _number("settings.target", settings["target"], 0, MAX_CLASSES - 1, integer=True)
    if settings.get("thumbnail", THUMBNAIL) != THUMBNAIL:
        raise RunFolderError(f"{RUN_FILE}'s settings.thumbnail is {_kind(settings['thumbnail'])}, where a run of "
                             f"this version writes {THUMBNAIL} (the side of its thumbnails in pixels).")
    for key in ("boxes", "stats_images", "targets"):
        _text(f"settings.{key}", settings.get(key), optional=True)
    if settings.get("yardsticks") is not None:
        _check_yardsticks(_mapping("settings.yardsticks", settings["yardsticks"], "a mapping of the metrics and "
                                   "their protocol"))
    for key, value in settings.items():
        _plain(f"settings.{_shown(key)}", value, 0 if key != "yardsticks" else 2)


def _check_yardsticks(identity: dict) -> None:
    """The metrics and how they were measured, through the writers' own checks: the metric names
    (`check_metrics`), the pixel protocol (`PixelProtocol`), ROAD's percentages and noise, the pointing tolerance."""
    from ..metrics import registry
    from ..metrics.insertion_deletion import PixelProtocol
    from ..metrics.yardsticks import YardstickOptions, check_metrics

    metrics = _list("settings.yardsticks.metrics", identity.get("metrics", []), "a list of metric names")
    for i, name in enumerate(metrics):
        _text(f"settings.yardsticks.metrics[{i}]", name)
    _number("settings.yardsticks.seed", identity.get("seed", 0), 0, 2**63 - 1, integer=True)
    checks: list[tuple[str, Callable[[], Any]]] = [("settings.yardsticks.metrics", lambda: check_metrics(metrics))]
    options: dict[str, Any] = {}
    if identity.get("protocol") is not None:
        protocol = _mapping("settings.yardsticks.protocol", identity["protocol"], "a mapping of the protocol's "
                            "numbers")
        known = {f.name for f in fields(PixelProtocol)}
        if set(protocol) <= known:  # a protocol of another version is only shown, its fields as they are
            checks.append(("settings.yardsticks.protocol", lambda: options.update(protocol=PixelProtocol(**protocol))))
        for key, value in protocol.items():
            _plain(f"settings.yardsticks.protocol.{_shown(key)}", value, 0)
        for key in ("name", "deletion_baseline"):  # as its sentence names them
            if key in protocol:
                _text(f"settings.yardsticks.protocol.{key}", protocol[key])
        for key in ("step", "blur_kernel", "blur_sigma"):
            if key in protocol:
                _a_number(f"settings.yardsticks.protocol.{key}", protocol[key])
    if identity.get("aopc") is not None:  # MoRF AOPC's regions, as its sentence names them
        aopc = _mapping("settings.yardsticks.aopc", identity["aopc"], "a mapping of the regions' tile and steps")
        for key in ("tile", "steps"):
            _number(f"settings.yardsticks.aopc.{key}", aopc.get(key), 1, MAX_ENTRIES, integer=True)
    for key in ("road_noise", "tolerance"):
        if key in identity:
            options[key] = _a_number(f"settings.yardsticks.{key}", identity[key])
    if "road_removed" in identity:
        removed = _list("settings.yardsticks.road_removed", identity["road_removed"], "a list of percentages")
        options["road_removed"] = tuple(_a_number(f"settings.yardsticks.road_removed[{i}]", p)
                                        for i, p in enumerate(removed))
    for field, check in checks:
        try:
            check()
        except UserError as err:
            raise _refused(field, err) from None
    # each metric's own check of the options it reads (`Metric.check`, as the evaluate CLI calls it: a run that
    # measured the pointing game had its boxes, so they count as given)
    given = SimpleNamespace(**{**vars(YardstickOptions()), **options, "boxes": "recorded"})
    for metric in registry.per_map():
        if metric.name in metrics:
            try:
                metric.check(given)
            except (UserError, TypeError, ValueError) as err:  # a percentage that is no number: float() refuses
                raise _refused(f"settings.yardsticks for {metric.name}",
                               err if isinstance(err, UserError) else UserError(str(err)[:80])) from None


def _check_method(field: str, method: object) -> None:
    """A method's record: its name and unit (text), its settings (plain values; a bottleneck's through
    `BottleneckSettings`' checks), the layers its maps were made at (a list of layer names)."""
    method = _mapping(field, method, "a mapping of the method's name, unit and settings")
    for key in ("name", "unit"):
        _text(f"{field}.{key}", method.get(key), optional=True)
    settings = _mapping(f"{field}.settings", method.get("settings"), "a mapping of the method's settings")
    for key, value in settings.items():
        _plain(f"{field}.settings.{_shown(key)}", value, MAX_SETTINGS_DEPTH)
    _text(f"{field}.settings.layer", settings.get("layer"), optional=True)
    _text(f"{field}.settings.placement", settings.get("placement"), optional=True)
    if settings.get("layers") is not None:
        _check_range_setting(f"{field}.settings.layers", settings["layers"])
    if "layers" in method:
        for i, name in enumerate(_list(f"{field}.layers", method["layers"], "a list of layer names")):
            _text(f"{field}.layers[{i}]", name)
    if "beta_k" in settings:  # a bottleneck (Per-Sample, CoIBA, Readout): the settings' own checks
        _check_bottleneck(f"{field}.settings", settings)


def _check_range_setting(field: str, layers: object) -> None:
    """CoIBA's layers: a list of layer names, or "FIRST:LAST" as `coiba.parse_range` reads it."""
    from ..coiba import parse_range

    if isinstance(layers, list):
        for i, name in enumerate(_list(field, layers, "a list of layer names")):
            _text(f"{field}[{i}]", name)
        if not layers:
            raise RunFolderError(f"{RUN_FILE}'s {field} is an empty list, where a run writes the layers of the range.")
        return
    try:
        parse_range(_text(field, layers))
    except UserError as err:
        raise _refused(field, err) from None


def _check_bottleneck(field: str, settings: dict) -> None:
    """A bottleneck's settings through `BottleneckSettings` (β·k, steps, batch, learning rate, σ_s, … in the ranges
    a run is started with)."""
    from ..bottleneck import BottleneckSettings

    known = {f.name for f in fields(BottleneckSettings)}
    try:
        BottleneckSettings(**{k: v for k, v in settings.items() if k in known})
    except UserError as err:
        raise _refused(field, err) from None
    except (TypeError, ValueError, OverflowError) as err:  # a value no check expected (a list for β·k, …)
        raise RunFolderError(f"{RUN_FILE}'s {field} holds a value a run would not write "
                             f"({type(err).__name__}).") from None


# ---- the table's parts --------------------------------------------------------------------------------------

#: A table column's pandas type (`store.COLUMNS`) → the Arrow types a run writes it as (null: a column of no value).
_ARROW_KINDS = {"str": ("string", "large_string"), "Int64": ("integer",), "int64": ("integer",),
                "float64": ("floating", "integer"), "boolean": ("boolean",)}
_KIND_WORDS = {"str": "text", "Int64": "whole numbers", "int64": "whole numbers", "float64": "numbers",
               "boolean": "true or false"}


def column_problem(schema, columns: dict[str, str]) -> str | None:
    """Why a part's (or the table's) columns are not what a run writes (`columns`: `store.COLUMNS`, name → pandas
    type), as a phrase ("its column total_bits holds string values where a run writes numbers"), or None: a column
    of another type would make the table's types (`store.with_columns`) or a number's formatting fail later, so the
    part counts as damaged."""
    import pyarrow.types as pat

    for field in schema:
        want = columns.get(field.name)
        if want is None or pat.is_null(field.type):
            continue
        if not any(getattr(pat, f"is_{kind}")(field.type) for kind in _ARROW_KINDS[want]):
            return (f"its column {_shown(field.name)} holds {_shown(str(field.type), 20)} values where a run writes "
                    f"{_KIND_WORDS[want]}")
    return None


#: The largest array a run's map file may unpack to: a float32 array of the most pixels an image may have
#: (`images.MAX_PIXELS`); a map (float16, the network's crop) and a part's thumbnails (28 × 28 each) are far smaller.
def max_member_bytes() -> int:
    from ..images import MAX_PIXELS

    return 4 * MAX_PIXELS


__all__ = ["MAX_ENTRIES", "MAX_RUN_FILE_BYTES", "MAX_SETTINGS_DEPTH", "MAX_TEXT_CHARS", "RUN_FILE", "RUN_FORMAT",
           "RunFolderError", "check_info", "check_preprocess",
           "column_problem", "max_member_bytes", "parse_run_file"]
