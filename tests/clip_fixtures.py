"""A tiny random CLIPModel saved the way transformers saves one (config.json, model.safetensors, the tokenizer's
files, preprocessor_config.json), built offline: a tokenizer with a small vocabulary written here, and a
vision tower of 32-px images in 8-px patches (a 4×4 grid plus the class token)."""
from __future__ import annotations

import string
from pathlib import Path

import torch

#: Words with a token of their own in the tiny vocabulary (others are spelt letter by letter).
WORDS = ("cat", "dog", "ruler", "photo", "watermark")


def tiny_tokenizer():
    """CLIP's tokenizer class over a vocabulary of letters, digits, a few whole words and the two special tokens
    (start 0, end 1 = padding), as CLIP's byte-pair encoding reads them (a word's last piece ends in </w>)."""
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for char in string.ascii_lowercase + string.digits + ".,!?'-":
        vocab.setdefault(char, len(vocab))
        vocab.setdefault(char + "</w>", len(vocab))
    merges = []
    for word in WORDS:  # merge left to right: c+a → ca, ca+t</w> → cat</w>
        piece = word[0]
        for i, char in enumerate(word[1:], start=1):
            right = char + ("</w>" if i == len(word) - 1 else "")
            merges.append((piece, right))
            piece += right
            vocab.setdefault(piece, len(vocab))
    return CLIPTokenizer(vocab=vocab, merges=merges)


def tiny_clip_config(layers: int = 4, image_size: int = 32, patch_size: int = 8, **overrides):
    """A CLIPConfig with a 2-layer text tower, a `layers`-layer vision tower (hidden 32) and 16-d embeddings."""
    from transformers import CLIPConfig

    text = dict(vocab_size=len(tiny_tokenizer()), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=24, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    vision = dict(image_size=image_size, patch_size=patch_size, hidden_size=32, intermediate_size=48,
                  num_hidden_layers=layers, num_attention_heads=2)
    return CLIPConfig(text_config=text, vision_config=vision, projection_dim=16, **overrides)


def save_tiny_clip(folder: Path, *, layers: int = 4, image_size: int = 32, patch_size: int = 8, seed: int = 1,
                   processor: bool = True, tokenizer: bool = True) -> Path:
    """A tiny random CLIPModel (seeded) saved by save_pretrained, with its tokenizer and (optionally) a
    CLIPImageProcessor of `image_size` (mean = std = 0.5)."""
    from transformers import CLIPImageProcessor, CLIPModel

    folder = Path(folder)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        CLIPModel(tiny_clip_config(layers, image_size, patch_size)).save_pretrained(folder)
    if tokenizer:
        tiny_tokenizer().save_pretrained(folder)
    if processor:
        CLIPImageProcessor(size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size},
                           image_mean=[0.5] * 3, image_std=[0.5] * 3).save_pretrained(folder)
    return folder
