"""Helpers for the timm, Hugging Face and model-folder tests: tiny random models saved the way timm
(`save_for_hf`) and transformers (`save_pretrained`) save them, offline, and an image to attribute."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image

FRUIT = ["apple", "banana", "cherry", "date", "elderberry"]


def write_image(path: Path, size: tuple[int, int] = (90, 70)) -> Path:
    """A random RGB image (not square, so resize and crop both act)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


def save_timm_folder(folder: Path, name: str = "resnet18", classes: list[str] | None = None, **kwargs) -> Path:
    """timm's `name` with random weights (seeded) and a head of len(classes), saved by timm's save_for_hf
    (config.json with "architecture", label names, model.safetensors)."""
    import timm
    from timm.models import save_for_hf

    classes = FRUIT if classes is None else classes
    torch.manual_seed(1)
    model = timm.create_model(name, num_classes=len(classes), **kwargs)
    save_for_hf(model, folder, model_config={"label_names": list(classes)}, safe_serialization=True)
    return folder


#: Tiny timm transformers (model_args saved in config.json, so the folder rebuilds the same small network): a ViT
#: with a class token, a DeiT with class and distillation tokens, a ViT with a class token and 4 registers, a Swin
#: (channels-last grid), all on 32-px images.
TINY_TIMM = {
    "vit": ("vit_tiny_patch16_224", dict(img_size=32, patch_size=8, embed_dim=16, depth=3, num_heads=2)),
    "deit": ("deit_tiny_distilled_patch16_224", dict(img_size=32, patch_size=8, embed_dim=16, depth=3, num_heads=2)),
    "vit_reg": ("vit_tiny_patch16_224", dict(img_size=32, patch_size=8, embed_dim=16, depth=3, num_heads=2,
                                             reg_tokens=4)),
    "swin": ("swin_tiny_patch4_window7_224", dict(img_size=32, patch_size=2, window_size=4, embed_dim=8,
                                                   depths=(1, 1), num_heads=(1, 2))),
}


def save_tiny_timm(folder: Path, kind: str, classes: list[str] | None = None) -> Path:
    """A tiny timm transformer of `TINY_TIMM` with random weights (seeded), saved by save_for_hf with its
    model_args."""
    import timm
    from timm.models import save_for_hf

    name, args = TINY_TIMM[kind]
    classes = FRUIT if classes is None else classes
    torch.manual_seed(1)
    model = timm.create_model(name, num_classes=len(classes), **args)
    save_for_hf(model, folder, model_config={"label_names": list(classes)}, model_args=args, safe_serialization=True)
    return folder


def tiny_vit_config(classes: list[str] | None = None, **overrides):
    """A ViT with 32 hidden units, 2 layers and 16-px patches on 64-px images: a 4×4 grid plus the class token."""
    from transformers import ViTConfig

    classes = FRUIT if classes is None else classes
    return ViTConfig(image_size=64, patch_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, id2label=dict(enumerate(classes)),
                     label2id={n: i for i, n in enumerate(classes)}, **overrides)


def save_hf_vit(folder: Path, classes: list[str] | None = None) -> Path:
    """A tiny random ViTForImageClassification and its image processor (64 × 64, mean = std = 0.5), saved by
    save_pretrained."""
    from transformers import ViTForImageClassification, ViTImageProcessor

    torch.manual_seed(1)
    ViTForImageClassification(tiny_vit_config(classes)).save_pretrained(folder)
    ViTImageProcessor(size={"height": 64, "width": 64}).save_pretrained(folder)
    return folder


def save_hf_convnext(folder: Path, num_labels: int = 3) -> Path:
    """A tiny random ConvNextForImageClassification (hidden sizes 8…32, 5 blocks) without class names (transformers
    calls them LABEL_0, …) and a ConvNeXt processor (shortest edge 64, crop_pct 0.875, bicubic)."""
    from transformers import ConvNextConfig, ConvNextForImageClassification, ConvNextImageProcessor

    torch.manual_seed(1)
    config = ConvNextConfig(hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 2, 1], num_labels=num_labels)
    ConvNextForImageClassification(config).save_pretrained(folder)
    ConvNextImageProcessor(size={"shortest_edge": 64}, crop_pct=0.875).save_pretrained(folder)
    return folder


def edit_config(folder: Path, **entries) -> None:
    """Change entries of a saved folder's config.json (None removes one)."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    for key, value in entries.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def attribute_cli(argv: list, capsys, tmp_path: Path) -> tuple[dict, np.ndarray]:
    """`attribute ARGV --steps 2 --n 8` in-process: its JSON summary and its heatmap, checked finite and not
    constant."""
    from iba_core.cli import main

    out = tmp_path / "heatmap.npy"
    code = main(["attribute", *map(str, argv), "--steps", "2", "--n", "8", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    heatmap = np.load(out)
    assert np.isfinite(heatmap).all() and heatmap.std() > 0  # finite and not constant
    return json.loads(captured.out.strip()), heatmap
