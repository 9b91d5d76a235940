"""The zoo's models: one small variant per timm module and a tiny configuration per Hugging Face image-classifier
type, random weights, saved as their users save them (timm's `save_for_hf`, transformers' `save_pretrained` with an
image processor). Shared by benchmarks/bench_zoo.py and its CI sample (tests/networks/test_zoo_sample.py).

A family is "timm:MODULE" (a module of `timm.models`, e.g. "timm:vision_transformer") or "hf:TYPE" (a model type
of transformers' `AutoModelForImageClassification`, e.g. "hf:swin"). `build_family(family, folder)` writes the
folder and returns what was built; a family that cannot be built offline raises `NotBuilt` with its reason.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import torch

CLASSES = ["apple", "banana", "cherry", "date", "elderberry"]  # a 5-class head, as a fine-tuned user's
#: The benchmark's cap on a variant's parameters: the smallest variant of a family above it is not built.
MAX_PARAMS = 30_000_000
#: Words of timm's variant names, smallest first: a variant named with an earlier word is tried first.
SIZE_WORDS = ("test", "atto", "femto", "pico", "nano", "xxtiny", "xtiny", "tiny", "xxs", "xs", "mini", "lite",
              "small", "s0", "b0", "m0", "t0", "s", "t")
BIG_WORDS = ("base", "medium", "large", "huge", "giant", "gigantic", "enormous", "l", "m", "xl", "b")
#: Variants tried per timm module (counted on the meta device, smallest buildable kept).
CANDIDATES = 8


class NotBuilt(Exception):
    """A family that cannot be built offline here; its message is the reason (one sentence)."""


def timm_families() -> dict[str, list[str]]:
    """timm module → its model names (`timm.list_models()`, grouped by `_model_to_module`)."""
    import timm
    from timm.models._registry import _model_to_module

    families: dict[str, list[str]] = {}
    for name in timm.list_models():
        families.setdefault(_model_to_module[name], []).append(name)
    return families


def hf_families() -> list[str]:
    """The model types of transformers' AutoModelForImageClassification."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES

    return list(MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES)


def all_families() -> list[str]:
    return [f"hf:{t}" for t in hf_families()] + [f"timm:{m}" for m in sorted(timm_families())]


def _name_priority(name: str) -> tuple:
    """Sort key of a timm variant name: a small-size word first, no big-size word, the smaller first number."""
    tokens = re.split(r"[_\-.]", name)
    words = [SIZE_WORDS.index(t) for t in tokens if t in SIZE_WORDS]
    words += [i for i, w in enumerate(SIZE_WORDS) if len(w) > 2 and any(t.endswith(w) for t in tokens)]
    big = any(t in BIG_WORDS for t in tokens)
    numbers = [int(n) for n in re.findall(r"\d+", name)]
    return (min(words, default=len(SIZE_WORDS)), big, numbers[0] if numbers else 0, len(name))


def count_timm(name: str, **kwargs) -> int:
    """Parameters of timm's `name` with a 5-class head, built on the meta device (no memory, no weights)."""
    import timm

    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = timm.create_model(name, num_classes=len(CLASSES), **kwargs)
    return sum(p.numel() for p in model.parameters())


def pick_timm(names: list[str], max_params: int = MAX_PARAMS) -> tuple[str, int, list[str]]:
    """(variant, parameters, notes) of the smallest buildable variant among the likeliest small names; NotBuilt when
    none builds or the smallest is above `max_params`."""
    counted, notes = [], []
    for name in sorted(names, key=_name_priority)[:CANDIDATES]:
        try:
            counted.append((count_timm(name), name))
        except Exception as err:  # noqa: BLE001 - a variant timm cannot build: try the next
            notes.append(f"{name}: {type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''}")
    if not counted:
        raise NotBuilt(f"none of its variants builds offline ({notes[0] if notes else 'no variants'}).")
    params, name = min(counted)
    if params > max_params:
        raise NotBuilt(f"its smallest variant ({name}) has {params / 1e6:.0f} M parameters, above the "
                       f"benchmark's cap of {max_params / 1e6:.0f} M.")
    return name, params, notes


def save_timm(folder: Path, name: str, size: int | None = None, **kwargs) -> Path:
    """timm's `name` (random weights, seeded, a 5-class head, `kwargs` such as img_size: saved as its model_args)
    saved by save_for_hf; `size`: the input side its preprocessing crops (pretrained_cfg's input_size)."""
    import timm
    from timm.models import save_for_hf

    torch.manual_seed(1)
    overlay = {} if size is None else {"pretrained_cfg_overlay": {"input_size": (3, size, size)}}
    model = timm.create_model(name, pretrained=False, num_classes=len(CLASSES), **overlay, **kwargs)
    config = {"label_names": list(CLASSES)}
    try:
        save_for_hf(model, folder, model_config=config, model_args=kwargs or None, safe_serialization=True)
    except RuntimeError as err:  # tensors shared between modules (CoaT): safetensors refuses, as users then find
        if "share memory" not in str(err):
            raise
        save_for_hf(model, folder, model_config=config, model_args=kwargs or None, safe_serialization=False)
    return folder


# --- Hugging Face: a tiny configuration per model type ---------------------------------------------------------

#: Config fields shrunk on every type (where the type has them): int fields to a value, list fields per entry.
TINY_INTS = {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
             "embed_dim": 16, "projection_dim": 16, "num_channels_in_patch": 16, "d_latents": 32,
             "num_latents": 16, "num_self_attends_per_block": 1, "n_embd": 32, "n_layer": 2, "n_head": 2,
             "stem_channels": 8, "out_channels": 16, "num_groups": 2}
TINY_LISTS = {"depths": lambda i, v: 1, "num_heads": lambda i, v: 1, "hidden_sizes": lambda i, v: 8 * 2 ** min(i, 3),
              "embed_dims": lambda i, v: 8 * 2 ** min(i, 3), "num_attention_heads": lambda i, v: 1,
              "num_encoder_blocks": lambda i, v: 1, "sr_ratios": lambda i, v: v, "mlp_ratios": lambda i, v: 2,
              "hidden_dims": lambda i, v: 8 * 2 ** min(i, 3), "embed_dim": lambda i, v: 16 * 2 ** min(i, 3),
              "depth": lambda i, v: 1}
#: Per-type settings where the generic shrinking is not enough (the type's own constraints).
HF_OVERRIDES: dict[str, dict] = {
    "vit": {"image_size": 64, "patch_size": 16},
    "deit": {"image_size": 64, "patch_size": 16},
    "swin": {"image_size": 64, "patch_size": 4, "window_size": 4, "embed_dim": 16, "depths": [1, 1],
             "num_heads": [1, 2]},
    "convnext": {"hidden_sizes": [8, 16, 24, 32], "depths": [1, 1, 2, 1]},
    "cvt": {"depth": [1, 2, 3]},  # its drop-path rates are indexed by stage: stage i needs more than i blocks
    "hgnet_v2": {"embedding_size": 16, "stem_channels": [3, 16, 16], "stage_in_channels": [16, 32, 64, 128],
                 "stage_mid_channels": [8, 16, 32, 64], "stage_out_channels": [32, 64, 128, 256],
                 "hidden_sizes": [32, 64, 128, 256], "stage_num_blocks": [1, 1, 1, 1],
                 "stage_numb_of_layers": [2, 2, 2, 2]},
    "efficientnet": {"image_size": 224, "width_coefficient": 0.25, "depth_coefficient": 0.5, "hidden_dim": 320},
}
#: Types whose forward takes no image tensor (ImageGPT: colour-cluster ids): saved unchecked, the loader's answer is
#: what is measured.
NO_PIXELS = ("imagegpt",)
#: Types whose sizes depend on each other in ways the generic shrinking breaks: built at their default size.
KEEP_DEFAULT_SIZE = ("pp_lcnet",)


#: Fields a config derives from the others (re-derived from the shrunk ones when it is made again).
DERIVED = ("transformers_version", "model_type", "architectures", "stage_names", "out_features", "out_indices",
           "id2label", "label2id", "num_labels", "dtype", "torch_dtype", "_name_or_path")


def _shrunk(fields: dict) -> dict:
    """A config's own fields (`to_dict`: the names it stores, not its aliases) with the sizes made tiny."""
    fields = {k: v for k, v in fields.items() if k not in DERIVED}
    for field, value in TINY_INTS.items():
        if isinstance(fields.get(field), int) and not isinstance(fields[field], bool):
            fields[field] = value if field == "hidden_size" else min(value, fields[field])
    for field, shrink in TINY_LISTS.items():
        value = fields.get(field)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
            fields[field] = [shrink(i, v) for i, v in enumerate(value)]
    return fields


def tiny_hf_config(model_type: str, overrides: dict | None = None):
    """transformers' default configuration of `model_type`, shrunk (`TINY_INTS`, `TINY_LISTS`, `HF_OVERRIDES`) and
    made again from the shrunk fields (so the ones it derives follow), with the 5 class names."""
    from transformers import AutoConfig

    fields = AutoConfig.for_model(model_type).to_dict()
    fields = {k: v for k, v in fields.items() if k not in DERIVED} if model_type in KEEP_DEFAULT_SIZE \
        else _shrunk(fields)
    if model_type not in KEEP_DEFAULT_SIZE and isinstance(fields.get("vision_config"), dict):  # CLIP-like types: the image tower's settings
        fields["vision_config"] = _shrunk(fields["vision_config"])
    for field, value in {**HF_OVERRIDES.get(model_type, {}), **(overrides or {})}.items():
        nested = isinstance(fields.get("vision_config"), dict) and field in fields["vision_config"]
        (fields["vision_config"] if nested else fields)[field] = value
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES

    classes = MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES[model_type]
    # a saved model names its class; transformers' from_config needs it where a type has several (DeiT, LeViT …)
    first = [classes if isinstance(classes, str) else classes[0]]
    config = AutoConfig.for_model(model_type, **fields, id2label=dict(enumerate(CLASSES)), architectures=first,
                                  label2id={n: i for i, n in enumerate(CLASSES)})
    # a config that keeps its own num_labels beside id2label (PvT's: 1000) gets a head of as many classes as named
    config.num_labels = len(CLASSES)
    return config


def _processor(model_type: str, config):
    """The type's own image processor (PIL flavour where there is one) with its defaults, sized to the config's
    image_size; None where transformers names none."""
    import transformers
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type)
    if not names:
        return None
    names = [names] if isinstance(names, str) else [names.get("pil"), names.get("torchvision")]
    for name in filter(None, names):
        try:
            cls = getattr(transformers, name)
            defaults = cls().to_dict()
        except Exception:  # noqa: BLE001 - not importable here: the other flavour
            continue
        side = getattr(getattr(config, "vision_config", config), "image_size", None)
        sizes = {}
        if isinstance(side, int) and isinstance(defaults.get("size"), dict):
            edge = defaults["size"].get("shortest_edge")
            sizes["size"] = {"shortest_edge": side} if edge else {"height": side, "width": side}
            if isinstance(defaults.get("crop_size"), dict):
                sizes["crop_size"] = {"height": side, "width": side}
        processor = cls(**sizes)
        return processor
    return None


def save_hf(folder: Path, model_type: str, overrides: dict | None = None) -> tuple[Path, int]:
    """A tiny random `model_type` classifier and its image processor saved by save_pretrained; (folder, parameters)."""
    from transformers import AutoModelForImageClassification

    try:
        config = tiny_hf_config(model_type, overrides)
        torch.manual_seed(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = AutoModelForImageClassification.from_config(config).eval()
            side = getattr(getattr(config, "vision_config", config), "image_size", 224)
            side = side if isinstance(side, int) else 224
            if model_type not in NO_PIXELS:  # a tiny config that runs
                model(torch.zeros(1, getattr(config, "num_channels", 3), side, side))
    except Exception as err:  # noqa: BLE001 - the type's reason, said as the family's
        first = str(err).splitlines()[0][:200] if str(err) else ""
        raise NotBuilt(f"transformers cannot build it from a tiny configuration offline "
                       f"({type(err).__name__}: {first.rstrip('.')}).") from None
    model.save_pretrained(folder)
    processor = _processor(model_type, config)
    if processor is not None:
        processor.save_pretrained(folder)
    return folder, sum(p.numel() for p in model.parameters())


def build_family(family: str, folder: Path, max_params: int = MAX_PARAMS) -> dict:
    """Write `family`'s model folder; {"variant", "params", "notes"}. NotBuilt (its reason) where it cannot be."""
    kind, _, name = family.partition(":")
    if kind == "timm":
        names = timm_families().get(name)
        if not names:
            raise NotBuilt(f"timm has no module {name!r}.")
        variant, params, notes = pick_timm(names, max_params)
        try:
            save_timm(folder, variant)
        except Exception as err:  # noqa: BLE001 - counted on meta, but its weights cannot be made
            first = (str(err).strip().splitlines() or [""])[0][:160].rstrip(".")
            raise NotBuilt(f"timm cannot build {variant} with random weights ({type(err).__name__}: {first}).") from None
        return {"variant": variant, "params": params, "notes": notes}
    if kind == "hf":
        _, params = save_hf(folder, name)
        return {"variant": name, "params": params, "notes": []}
    raise ValueError(f"unknown family {family!r}")


# --- The fixed CI sample: ~15 families at tiny sizes (tests/networks/test_zoo_sample.py) -------------------------

_VIT = {"img_size": 64, "size": 64}
#: family → how its tiny model is made: ("timm", variant, create_model arguments) or ("hf", type, config overrides).
SAMPLE: dict[str, tuple[str, str, dict]] = {
    "timm:resnet": ("timm", "test_resnet", {"size": 64}),
    "timm:efficientnet": ("timm", "test_efficientnet", {"size": 64}),
    "timm:convnext": ("timm", "test_convnext", {"size": 64}),
    "timm:regnet": ("timm", "regnetx_002", {"size": 64}),
    "timm:densenet": ("timm", "densenet121", {"size": 64, "growth_rate": 8, "block_config": (1, 1, 1, 1)}),
    "timm:vision_transformer": ("timm", "test_vit", _VIT),
    "timm:vision_transformer+registers": ("timm", "test_vit", {**_VIT, "reg_tokens": 4}),
    "timm:vision_transformer+no_class_token": ("timm", "test_vit", {**_VIT, "class_token": False,
                                                                    "global_pool": "avg"}),
    "timm:deit": ("timm", "deit_tiny_distilled_patch16_224", {**_VIT, "depth": 2, "embed_dim": 32, "num_heads": 2}),
    "timm:swin_transformer": ("timm", "swin_tiny_patch4_window7_224", {**_VIT, "window_size": 4, "embed_dim": 16,
                                                                       "depths": (1, 1), "num_heads": (1, 2)}),
    "timm:eva": ("timm", "eva02_tiny_patch14_224", {"img_size": 56, "size": 56, "depth": 2, "embed_dim": 32,
                                                     "num_heads": 2}),
    "timm:levit": ("timm", "levit_128s", {**_VIT}),
    "timm:mlp_mixer": ("timm", "mixer_s32_224", {"img_size": 96, "size": 96}),  # its variants fix depth, width
    "hf:vit": ("hf", "vit", {}),
    "hf:convnext": ("hf", "convnext", {"image_size": 64}),
    "hf:swin": ("hf", "swin", {}),
}


def build_sample(family: str, folder: Path) -> Path:
    """The CI sample's tiny model of `family` (`SAMPLE`), saved to `folder`."""
    kind, name, kwargs = SAMPLE[family]
    if kind == "timm":
        return save_timm(folder, name, **kwargs)
    return save_hf(folder, name, kwargs)[0]
