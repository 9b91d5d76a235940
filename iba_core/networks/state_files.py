"""Reading weights files safely and fitting a state dict to a model.

Only tensors are read: `torch.load(..., weights_only=True)` (which unpickles nothing but tensors and
plain containers) or safetensors. A file that holds more than weights is refused with a sentence saying
why and what to save instead:

- a pickled whole module (`torch.save(model, path)`): unpickling runs arbitrary code. `trust_pickle=True`
  (the CLI's `--trust-pickle`) loads it anyway, for files you made yourself; the app never does.
- a TorchScript archive (`torch.jit.save`) or an ExportedProgram (`torch.export.save`): a compiled
  program, not a state dict.

A state dict that does not fit the model (missing or unexpected keys, shape mismatches, integer or
boolean tensors where the model holds floating-point parameters) gives one message listing the first few
mismatches. When only the output layer differs, the message says so (and names the class list when one was
given); when more differs, a caller may have it name a source the weights do fit (`explain`; model cards pass
`state_match.source_hint`: "these weights look like the built-in EfficientNet-Lite0 backbone with a 5-class
head"). Messages are whole sentences: what the file's reader said is not echoed (it can be long or cut), and names
taken from the file are shortened.
"""
from __future__ import annotations

import hashlib
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import torch
from torch import nn

from ..errors import UserError
from ..trust import shown
from .spec import WeightsUnavailableError

#: How many mismatches a message lists.
SHOWN = 5

SAVE_INSTEAD = "save the weights instead: torch.save(model.state_dict(), path) (or safetensors' save_file)"


class UnsafeWeightsError(UserError):
    """A weights file that holds more than tensors (a pickled module, TorchScript, an ExportedProgram)."""


class WeightsMismatchError(UserError):
    """A state dict that does not fit its model.

    file_outputs: the size of the file's tensor at the model's output layer (its number of outputs), None where the
    file lacks that layer; a hint may depend on it (one output for two class names: a binary classifier).
    binary: set where the file has one output for a class list of two names and no head was named: a binary
    classifier, built with two outputs (`cards.load_card`)."""

    file_outputs: int | None = None
    binary: bool = False


def weights_hash(path: str | os.PathLike, length: int = 12) -> str:
    """A short hash of a file's bytes: the weights id, so statistics caches are per weights."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:length]


def _archive_kind(path: Path) -> str | None:
    """'TorchScript' or 'ExportedProgram' for those zip archives, else None."""
    if not zipfile.is_zipfile(path):
        return None
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    if any(n.endswith("/constants.pkl") or "/code/__torch__" in n for n in names):
        return "TorchScript"
    if any(n.endswith(("/archive_format", "/models/model.json")) or "serialized_exported_program" in n
           for n in names):
        return "ExportedProgram"
    return None


#: safetensors' dtype names (its header's) as torch dtypes, for `peek_state`.
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                      "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
                      "BOOL": torch.bool}


def damaged_safetensors_error(path: str | os.PathLike) -> WeightsUnavailableError:
    """The one sentence for a safetensors file that cannot be read (damaged, a lying header, not safetensors). The
    path is named whole: the app's form replaces its working paths by the names of the files given (`app.models`)."""
    return WeightsUnavailableError(
        f"Could not read the safetensors file {path}: it is damaged or not a safetensors file; save the "
        "weights again with safetensors' save_file(model.state_dict(), path).")


def unsafe_pickle_error(path: str | os.PathLike) -> UnsafeWeightsError:
    """The one sentence for a weights file holding pickled Python objects (refused unless trust_pickle)."""
    return UnsafeWeightsError(
        f"{path} holds pickled Python objects (probably a whole model saved with torch.save(model, "
        f"path)); loading them could run arbitrary code, so it is refused. {SAVE_INSTEAD[0].upper()}"
        f"{SAVE_INSTEAD[1:]}.",
        cli_hint="Or, for a file you made yourself, add --trust-pickle to load it.",
        app_hint="Then use the saved file.")


#: How a weights file's name ends (a state_dict saved by torch.save, or safetensors).
WEIGHTS_SUFFIXES = (".pth", ".pt", ".safetensors")


def folder_given(path: str | os.PathLike, what: str = "weights file") -> str:
    """The words for a folder given where a file is expected: 'is a folder; choose the weights file inside it (…)',
    naming the weights files it holds (at most three), else what such a file is called."""
    try:
        inside = sorted(p.name for p in Path(path).iterdir() if p.suffix.lower() in WEIGHTS_SUFFIXES)
    except OSError:
        inside = []
    holds = (f"{', '.join(shown(n, 40) for n in inside[:3])}{', …' if len(inside) > 3 else ''}" if inside
             else f"a {', '.join(WEIGHTS_SUFFIXES)} file")
    return f"is a folder; choose the {what} inside it ({holds})"


def folder_given_error(path: str | os.PathLike, shown_as: object = None) -> WeightsUnavailableError:
    """A folder given where the weights file is expected, in one sentence (shown_as: the path as the user typed or
    chose it; default `path`)."""
    return WeightsUnavailableError(f"{shown(shown_as if shown_as is not None else path)} {folder_given(path)}.")


def _checked_file(path: str | os.PathLike) -> Path:
    path = Path(path).expanduser()
    if path.is_dir():
        raise folder_given_error(path)
    if not path.is_file():
        raise WeightsUnavailableError(f"Weights file not found: {path}")
    return path


def _torch_load(path: Path, *, trust_pickle: bool, mmap: bool = False):
    """torch.load with weights_only (tensors and plain containers), or the one sentence for what it refused; a
    pickled module only with `trust_pickle`. mmap: the tensors are mapped, not read (their data stays on disk)."""
    kind = _archive_kind(path)
    if kind is not None:
        raise UnsafeWeightsError(
            f"{path} is a {kind} archive (a compiled program), not a state dict; it is not loaded. "
            f"From the model in Python, {SAVE_INSTEAD}.")
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # noqa: BLE001 - pickle errors come in many types
        if not _is_unsafe_pickle(err):
            raise WeightsUnavailableError(
                f"Could not read the weights file {path}: it is not a PyTorch state dict (.pth/.pt) or a "
                f"safetensors file, or it is damaged; {SAVE_INSTEAD}.") from err
        if not trust_pickle:
            raise unsafe_pickle_error(path) from None
    return torch.load(path, map_location="cpu", weights_only=False)


def read_weights(path: str | os.PathLike, *, trust_pickle: bool = False) -> dict[str, torch.Tensor] | nn.Module:
    """The state dict in a .pth/.pt/.safetensors file (a whole module only with trust_pickle=True).

    Checkpoints that wrap the state dict ({"state_dict": …} or {"model": …}) are unwrapped.
    """
    path = _checked_file(path)
    if path.suffix.lower() == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError, RuntimeError) as err:
            raise damaged_safetensors_error(path) from err
    return _unwrap(_torch_load(path, trust_pickle=trust_pickle), path)


def peek_state(path: str | os.PathLike, *, trust_pickle: bool = False) -> dict[str, torch.Tensor] | None:
    """A weights file's names, shapes and dtypes without its data (meta tensors from a safetensors header; a .pth
    mapped, not read), with `read_weights`' refusals (a damaged file, pickled objects); None when only a full read
    can tell (an old-format .pth, a whole module loaded with trust_pickle)."""
    path = _checked_file(path)
    if path.suffix.lower() == ".safetensors":
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), "pt") as file:  # reads and checks the header: offsets must cover the file
                state = {}
                for key in file.keys():
                    piece = file.get_slice(key)
                    dtype = SAFETENSORS_DTYPES.get(piece.get_dtype(), torch.float32)
                    state[key] = torch.empty(piece.get_shape(), dtype=dtype, device="meta")
                return state
        except (SafetensorError, OSError, ValueError, RuntimeError) as err:
            raise damaged_safetensors_error(path) from err
    try:
        obj = _torch_load(path, trust_pickle=False, mmap=True)  # never unpickles objects, even where trusted
    except UnsafeWeightsError:
        if trust_pickle and _archive_kind(path) is None:
            return None  # a pickled module the caller trusts: its names are known once it is loaded
        raise
    except WeightsUnavailableError:
        return None  # not mappable (an old-format file): the full read says what is wrong, if anything
    state = _unwrap(obj, path)
    return None if isinstance(state, nn.Module) else state


def _is_unsafe_pickle(err: Exception) -> bool:
    """Whether torch refused objects beyond tensors (rather than an unreadable or corrupt file)."""
    text = str(err).lower()
    return "unsupported global" in text


def _unwrap(obj, path: Path) -> dict[str, torch.Tensor] | nn.Module:
    if isinstance(obj, nn.Module):
        return obj
    if isinstance(obj, dict):
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return dict(obj)
        for name in ("state_dict", "model_state_dict", "model"):
            inner = obj.get(name)
            if isinstance(inner, nn.Module):
                return inner
            if isinstance(inner, dict) and inner and all(isinstance(v, torch.Tensor) for v in inner.values()):
                return dict(inner)
    raise WeightsUnavailableError(
        f"{path} holds no state dict (a mapping of parameter names to tensors); {SAVE_INSTEAD}.")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _fits_dtype(stored: torch.Tensor, own: torch.Tensor) -> bool:
    """Whether a stored tensor can stand for the model's: floating-point parameters need floating-point
    values (an int32 or bool file would load as a garbage network after a silent cast)."""
    return not own.is_floating_point() or stored.is_floating_point()


def require_floating(state: dict[str, torch.Tensor], title: str) -> None:
    """Refuse a state dict whose tensors are integers or booleans where a network keeps floating-point
    parameters (for networks whose model is built with the weights; `fit_state_dict` checks against the model).
    BatchNorm's step counters (`num_batches_tracked`) are integers by nature."""
    wrong = [(k, v) for k, v in state.items() if isinstance(v, torch.Tensor) and not v.is_floating_point()
             and not k.endswith("num_batches_tracked")]
    if wrong:
        _refuse_dtypes([(k, _dtype_name(v.dtype), "float") for k, v in wrong], title)


def _refuse_dtypes(wrong: list[tuple[str, str, str]], title: str) -> None:
    shown_dtypes = 3  # a whole file of int32 tensors would otherwise list a hundred
    more = f" and {len(wrong) - shown_dtypes} more" if len(wrong) > shown_dtypes else ""
    listed = ", ".join(f"{shown(k, 60)} {a}" for k, a, _ in wrong[:shown_dtypes])
    raise WeightsMismatchError(
        f"The weights file holds {len(wrong)} integer or boolean tensor(s) where {shown(title)} has floating-point "
        f"parameters ({listed}{more}); save the trained weights with torch.save(model.state_dict(), path).")


@dataclass(frozen=True)
class StateMismatch:
    """How a state dict differs from a model's: keys it lacks, keys it has too many, and (key, file shape, model
    shape) for tensors of another size. Empty (falsy) when it fits."""

    missing: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    shapes: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.shapes)


def compare_state(own: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor]) -> StateMismatch:
    """How `state` differs from `own` (a model's state dict; meta tensors do: only names and shapes count)."""
    return StateMismatch(
        tuple(k for k in own if k not in state), tuple(k for k in state if k not in own),
        tuple((k, tuple(state[k].shape), tuple(own[k].shape)) for k in own
              if k in state and tuple(state[k].shape) != tuple(own[k].shape)))


def output_layer(state: Mapping[str, torch.Tensor]) -> str | None:
    """The output layer's weight in a model's own state dict (in module order): the last weight of two or more
    dimensions (a Linear's, or a 1×1 conv's like SqueezeNet's); its first dimension is the number of outputs."""
    return next((k for k in reversed(list(state)) if k.endswith("weight") and isinstance(state[k], torch.Tensor)
                 and state[k].dim() >= 2), None)


def _only_output_layer(mismatch: StateMismatch, own: Mapping[str, torch.Tensor]) -> tuple[int, int] | None:
    """(file's outputs, model's outputs) when the output layer's size is all that differs, else None."""
    key = output_layer(own)
    if key is None or mismatch.missing or mismatch.unexpected or not mismatch.shapes:
        return None
    layer = key.rsplit(".", 1)[0] + "." if "." in key else ""
    if not all(k.startswith(layer) and k.count(".") == key.count(".") for k, _, _ in mismatch.shapes):
        return None
    stored = next((a for k, a, _ in mismatch.shapes if k == key), None)
    return (stored[0], tuple(own[key].shape)[0]) if stored else None


#: Names a source a refused state dict fits: (clause for the message, CLI hint, app hint), or None.
Explain = Callable[[Mapping[str, torch.Tensor]], "tuple[str, str, str] | None"]


def load_weights_file(model: nn.Module, path: str | os.PathLike, title: str, *, trust_pickle: bool = False) -> str:
    """Read a weights file safely (`read_weights`) into `model` (`fit_state_dict`); returns its weights id (the
    file's hash). One way for every source that takes `--weights FILE` (timm, Hugging Face)."""
    state = read_weights(path, trust_pickle=trust_pickle)
    if isinstance(state, nn.Module):  # a whole module, read only with trust_pickle: its tensors
        state = state.state_dict()
    fit_state_dict(model, state, title)
    return weights_hash(path)


def check_state(own: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor], title: str, *,
                classes: int | None = None, explain: Explain | None = None) -> None:
    """One message listing the first mismatches when `state` does not fit `own` (a model's state dict, meta tensors
    included: only names, shapes and dtypes count), else nothing. See `fit_state_dict` for `classes` and `explain`."""
    mismatch = compare_state(own, state)
    if mismatch:
        missing, unexpected, shapes = mismatch.missing, mismatch.unexpected, mismatch.shapes
        problems = [f"missing key {shown(k, 60)}" for k in missing]
        problems += [f"unexpected key {shown(k, 60)}" for k in unexpected]
        problems += [f"{shown(k, 60)}: file {list(a)}, model {list(b)}" for k, a, b in shapes]
        total = len(problems)
        lead, cli_hint, app_hint, tail = "The weights do not fit", "", "", ""
        head = _only_output_layer(mismatch, own)
        # The output layer's first dimension is the number of outputs; only name the class list when that is
        # what differs (a file from another architecture can differ in its inputs with as many outputs).
        if (classes is not None and shapes and shapes[-1][2][:1] == (classes,) and shapes[-1][1]
                and shapes[-1][1][0] != classes):
            lead = (f"The class list has {classes} names but the weights' output layer has "
                    f"{shapes[-1][1][0]} outputs, so the weights do not fit")
        elif head is not None and classes is None:
            lead = f"The weights' output layer has {head[0]} outputs but the network has {head[1]}, so they do not fit"
            cli_hint = f"A model card with a class list of {head[0]} names gives the network that output layer."
            app_hint = f"Give the class list: {head[0]} names, in the order of the outputs."
        elif head is None and explain is not None:
            found = explain(state)
            if found is not None:
                tail, cli_hint, app_hint = found
        shown_count = 2 if tail else SHOWN  # with a source that fits, the mismatches matter less than the source
        more = f" (and {total - shown_count} more)" if total > shown_count else ""
        err = WeightsMismatchError(
            f"{lead} {shown(title)}: {total} mismatch(es): {'; '.join(problems[:shown_count])}{more}{tail}.",
            cli_hint=cli_hint, app_hint=app_hint)
        key = output_layer(own)
        stored = state.get(key) if key is not None else None
        err.file_outputs = int(stored.shape[0]) if stored is not None and stored.dim() else None
        raise err
    wrong = [(k, _dtype_name(state[k].dtype), _dtype_name(own[k].dtype)) for k in own
             if not _fits_dtype(state[k], own[k])]
    if wrong:
        _refuse_dtypes(wrong, title)


def fit_state_dict(model: nn.Module, state: dict[str, torch.Tensor], title: str, *,
                   classes: int | None = None, explain: Explain | None = None) -> nn.Module:
    """Load `state` into `model`, or one message listing the first mismatches (`check_state`).

    `classes`: the length of the class list, named in the message when the output layer is what differs.
    `explain`: asked when more than the output layer differs, names a source the weights do fit
    (`state_match.source_hint`, a few seconds at most: model cards pass it).
    """
    check_state(model.state_dict(), state, title, classes=classes, explain=explain)
    model.load_state_dict(state)
    return model
