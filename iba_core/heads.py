"""What a classifier's outputs mean (its *head*), in one place: how logits become probabilities, and the
prediction term of the bottleneck's loss.

- "softmax" (default): one logit per class, classes exclusive; p = softmax(z).
- "sigmoid" (multi-label, Hugging Face's problem_type "multi_label_classification"): one logit per label,
  labels independent; p_c = σ(z_c) for each label on its own, so the probabilities need not sum to 1.
- "binary": one logit z for two classes, index 0 the negative (p = 1 − σ(z)), index 1 the positive (p = σ(z));
  `probabilities` returns both columns, so class indices 0 and 1 work as for a two-class softmax.
- "similarity" (a CLIP model, `networks.clip_models`): one output per text prompt, the cosine of the image
  embedding with the prompt's text embedding (−1…1, no logit scale). `probabilities` returns the cosines as
  they are: a similarity, not a probability (PROBABILITY_NOTES says so).

The loss (paper §3, eq. "final objective") is L = L_CE + β·L_I. For a softmax head L_CE is the cross-entropy of
the target class, −log softmax(z)_t, as in the paper. For a sigmoid head it is replaced by the negative log of
the target label's own probability, −log σ(z_t): the labels are independent, so the other labels' logits do not
enter (their presence or absence is not what is explained, and a softmax over independent labels would reward
the bottleneck for suppressing them). For a binary head it is −log σ(z) for the positive class and
−log σ(−z) = −log(1 − σ(z)) for the negative one: the cross-entropy of the two-class distribution. For a
similarity head it is −cos(image, prompt), M2IB's fitting term (Wang et al., NeurIPS 2023: loss = β·mean KL −
mean cosine over the noisy copies).

The default β·k differs by head (`DEFAULT_BETA_K`): the paper's 10 for classifiers; M2IB's β = 0.1 on the mean
information for the similarity head, i.e. β·k = 0.1 in this project's units (β = β·k / k on the summed KL).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .bottleneck import DEFAULT_BETA_K as PAPER_BETA_K
from .errors import UserError

#: The classifier heads (a model card's or a folder's `head`).
HEADS = ("softmax", "sigmoid", "binary")
#: A CLIP model's head: cosines with text prompts (not offered to model cards: it needs a text encoder).
SIMILARITY = "similarity"
ALL_HEADS = (*HEADS, SIMILARITY)
#: M2IB's β (Wang et al., NeurIPS 2023, their default) on the MEAN KL over the layer's k elements: β·k = 0.1 in this
#: project's units (β = β·k / k on the summed KL).
M2IB_BETA_K = 0.1
#: The default β·k of the bottleneck by head: the paper's 10 (β = 10/k, §4.1) for classifiers, M2IB's for the
#: similarity head. (`bottleneck.DEFAULT_BETA_K` is the paper's number itself.)
DEFAULT_BETA_K = {**{head: PAPER_BETA_K for head in HEADS}, SIMILARITY: M2IB_BETA_K}
#: A sigmoid head's label counts as present above this probability (σ(z) > 0.5 ⇔ z > 0).
PRESENT_P = 0.5
#: What the probabilities of each head are, for the front ends ("" for softmax: nothing to explain).
PROBABILITY_NOTES = {
    "softmax": "",
    "sigmoid": "Probabilities are per label (a multi-label network: labels are independent, so they need not sum "
               "to 1); labels above 50 % are the ones the network sees.",
    "binary": "A binary network: one output, p(positive) = σ(logit) and p(negative) = 1 − p(positive).",
    SIMILARITY: "A CLIP model: each number is the cosine similarity (−1…1) of the image with a text prompt, not a "
                "probability; CLIP's similarities of matching pairs are typically 0.2–0.35.",
}


def check_head(head: object) -> str:
    """`head` if it is one of ALL_HEADS, else a UserError naming them."""
    if head not in ALL_HEADS:
        raise UserError(f"Unknown head {str(head)[:40]!r}; choose one of: {', '.join(ALL_HEADS)}.")
    return str(head)


def default_beta_k(network_or_head: object) -> float:
    """The default β·k for a network (or a head name): `DEFAULT_BETA_K` of its head."""
    head = network_or_head if isinstance(network_or_head, str) else head_of(network_or_head)
    return DEFAULT_BETA_K.get(head, PAPER_BETA_K)


def head_of(network) -> str:
    """The head of a network (`Network`, its spec's `head`); "softmax" for a bare nn.Module or a wrapper
    without a spec."""
    return getattr(getattr(network, "spec", None), "head", "softmax")


def output_count(head: str, classes: int) -> int:
    """How many outputs a network with `classes` class names has under `head` (binary: one logit)."""
    return 1 if head == "binary" else classes


def check_fits(head: str, outputs: int | None, classes: int | None, title: str) -> None:
    """One sentence when `head` does not fit the network's output count or its class list (None: unknown).

    A binary head needs a class list of two names and one output; softmax and sigmoid heads one output per
    class name."""
    if head == "binary":
        if classes is not None and classes != 2:
            raise UserError(f"{title} has a binary head, which needs a class list of two names (negative, then "
                            f"positive), not {classes}.")
        if outputs is not None and outputs != 1:
            raise UserError(f"{title} has a binary head, which needs one output (the positive class's logit), but "
                            f"the network has {outputs}.")
    elif outputs is not None and classes is not None and outputs != classes:
        raise UserError(f"{title} has a {head} head with {classes} class names but {outputs} outputs; it needs one "
                        "output per name.")


def _binary_logit(logits: torch.Tensor) -> torch.Tensor:
    if logits.dim() != 2 or logits.shape[1] != 1:
        raise UserError(f"A binary head has one output per image, got logits shaped {tuple(logits.shape)}.")
    return logits[:, 0]


def probabilities(logits: torch.Tensor, head: str = "softmax") -> torch.Tensor:
    """(N, classes) probabilities from (N, outputs) logits: softmax; σ per label; binary [1 − σ(z), σ(z)]."""
    if head == "softmax":
        return logits.softmax(dim=1)
    if head == "sigmoid":
        return logits.sigmoid()
    if head == "binary":
        z = _binary_logit(logits)
        return torch.stack([torch.sigmoid(-z), torch.sigmoid(z)], dim=1)  # σ(−z) = 1 − σ(z), without cancellation
    if head == SIMILARITY:
        return logits  # the cosines themselves (see PROBABILITY_NOTES)
    raise ValueError(f"Unknown head {head!r}; choose one of: {', '.join(HEADS)}.")


def class_logits(logits: torch.Tensor, head: str = "softmax") -> torch.Tensor:
    """(N, classes): the score that logit-based explanations of each class explain. The logits themselves, except
    for a binary head: each class's log-odds, [−z, z] (log(σ(z) / (1 − σ(z))) = z), so both classes have one."""
    if head == "binary":
        z = _binary_logit(logits)
        return torch.stack([-z, z], dim=1)
    return logits


def predicted(logits: torch.Tensor, head: str = "softmax") -> torch.Tensor:
    """(N,) the most probable class of each image (σ and softmax are monotonic: the largest logit; binary:
    1 where z > 0)."""
    if head == "binary":
        return (_binary_logit(logits) > 0).long()
    return logits.argmax(dim=1)


def target_nll(logits: torch.Tensor, target_labels: torch.Tensor, head: str = "softmax") -> torch.Tensor:
    """The prediction term L_CE of the loss, averaged over the batch (see the module docstring).

    logits: (N, outputs); target_labels: (N,) class indices. softmax: F.cross_entropy; sigmoid: −log σ(z_t)
    (F.logsigmoid, stable for large |z|); binary: −log σ(z) for target 1, −log σ(−z) for target 0; similarity:
    −cos_t (the outputs are cosines)."""
    if head == "softmax":
        return F.cross_entropy(logits, target_labels)
    if head == "sigmoid":
        return -F.logsigmoid(logits.gather(1, target_labels.view(-1, 1))).mean()
    if head == "binary":
        sign = target_labels.to(logits.dtype) * 2 - 1  # target 1: +z, target 0: −z
        return -F.logsigmoid(sign * _binary_logit(logits)).mean()
    if head == SIMILARITY:  # M2IB's fitting term: −cos(image, prompt), averaged over the noisy copies
        return -logits.gather(1, target_labels.view(-1, 1)).mean()
    raise ValueError(f"Unknown head {head!r}; choose one of: {', '.join(HEADS)}.")


def present(probs: torch.Tensor, threshold: float = PRESENT_P) -> list[tuple[int, float]]:
    """(index, p) of every class of one image's probabilities (classes,) above `threshold`, most probable first."""
    order = torch.argsort(probs, descending=True)
    return [(int(i), float(probs[i])) for i in order if float(probs[i]) > threshold]
