"""Numeric precision of the network passes: fp32, or bf16/fp16 under autocast where the hardware has it.

Only the network's own passes (prefix, suffix per step, the evaluations' forward passes) run in the
lower precision; λ, the KL, Adam and the heatmap stay fp32 (the bottleneck's noise dwarfs bf16
rounding: seeded heatmaps of the offline network correlate at ≥ 0.99, see tests/test_precision.py).

`auto` (the default) picks a lower precision only where the hardware supports it (CPU: AVX512-BF16 or
AMX-BF16; CUDA: bf16, else fp16) *and* one measurement shows it is faster for that (network, layer,
device): depthwise convolutions, for one, can be slower in bf16 on a CPU. The choice is kept with
the network (`Network.memo.precision`), so it is measured once per process, and in a small memo on disk
(`cache.save_json`: checked on load; a garbled memo is warned about and rewritten on the next choice).

What the hardware offers comes from two functions, `cpu_flags` and `cuda_bf16`, so tests can fake any
machine (AVX2 only, AVX-512, AVX512-BF16/AMX; with or without a bf16 GPU).
"""
from __future__ import annotations

import contextlib
import statistics
import time
from pathlib import Path
from typing import Callable, Iterator

import torch

from .errors import UserError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cuda_bf16() -> bool:
    """Whether the CUDA device has bf16 support (False without CUDA)."""
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def unsupported(precision: str, device: torch.device | str) -> str | None:
    """None if `precision` has hardware support on `device`, else the reason it has not."""
    device = torch.device(device)
    if precision not in PRECISIONS:
        raise UserError(f"Unknown precision {precision!r}; choose one of: {', '.join(PRECISIONS)}.")
    if precision in ("auto", "fp32"):
        return None
    if device.type == "cuda":
        if precision == "bf16" and not cuda_bf16():
            return "this GPU has no bf16 support"
        return None
    if device.type != "cpu":
        return f"lower precision is not set up for {device.type} devices here"
    flags = cpu_flags()
    if precision == "bf16" and not flags & {"avx512_bf16", "amx_bf16"}:
        return "this CPU has no bf16 matrix instructions (AVX512-BF16 or AMX-BF16); bf16 would be emulated and slow"
    if precision == "fp16" and not flags & {"avx512_fp16", "amx_fp16"}:
        return "this CPU has no fp16 matrix instructions (AVX512-FP16 or AMX-FP16)"
    return None


def candidates(device: torch.device | str) -> list[str]:
    """Lower precisions worth measuring on `device`, best first."""
    device = torch.device(device)
    order = ["bf16", "fp16"] if device.type == "cuda" else ["bf16"]
    return [p for p in order if unsupported(p, device) is None]


@contextlib.contextmanager
def autocast(precision: str, device: torch.device | str) -> Iterator[None]:
    """Network passes in `precision` ("fp32": unchanged). Resolve "auto" first (`resolve`)."""
    if precision == "auto":
        raise ValueError("Resolve precision 'auto' to a concrete precision first.")
    if precision == "fp32":
        yield
        return
    reason = unsupported(precision, device)
    if reason:
        raise UserError(f"{precision} is not available: {reason}.")
    with torch.autocast(torch.device(device).type, dtype=DTYPES[precision]):
        yield


def measure(fn: Callable[[], object], repeats: int = 3, timer: Callable[[], float] = time.perf_counter) -> float:
    """Median seconds of `fn` over `repeats` runs after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        start = timer()
        fn()
        times.append(timer() - start)
    return statistics.median(times)


def fastest(options: dict[str, Callable[[], object]], timer: Callable[[], float] = time.perf_counter,
            repeats: int = 3) -> tuple[str, dict[str, float]]:
    """(the option that measured fastest, seconds per option). fp32 wins ties: it is the reference."""
    seconds = {name: measure(fn, repeats, timer) for name, fn in options.items()}
    best = min(seconds, key=lambda name: (seconds[name], name != "fp32"))
    return best, seconds


def machine_id(device: torch.device | str) -> str:
    """What a measured choice depends on besides the network: the processor (or GPU) and torch."""
    device = torch.device(device)
    if device.type == "cuda":
        chip = torch.cuda.get_device_name(device)
    else:
        chip = next((line.split(":", 1)[1].strip() for line in _cpuinfo_lines() if line.startswith("model name")), "cpu")
    return f"{chip} | torch {torch.__version__} | {torch.get_num_threads()} threads"


def _cpuinfo_lines() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def _disk_choices() -> Path:
    from .settings import cache_dir

    return cache_dir() / "precision.json"


def _valid_choices(data: dict | None) -> dict[str, str]:
    """The memo's entries that can be right: text keys naming a known precision (others are dropped)."""
    return {k: v for k, v in (data or {}).items() if isinstance(k, str) and isinstance(v, str) and v in DTYPES}


def _read_disk(key: str) -> str | None:
    from .cache import load_json

    return _valid_choices(load_json(_disk_choices())).get(key)


def _write_disk(key: str, value: str) -> None:
    """Add one choice to the memo; a garbled memo (warned about when read) is replaced by a sound one."""
    from .cache import load_json, save_json

    path = _disk_choices()
    try:
        data = _valid_choices(load_json(path))
        data[key] = value
        save_json(path, data)
    except OSError:
        pass  # a read-only cache only costs a measurement next time


def _disk_key(key: tuple, device: torch.device | str) -> str:
    """The disk memo's key: the caller's key and the machine (a choice measured elsewhere does not hold here)."""
    return " | ".join(map(str, (*key, machine_id(device))))


def would_measure(precision: str, device: torch.device | str, memo: dict | None = None, key: tuple = (),
                  persist: bool = False) -> bool:
    """Whether `resolve` with these arguments (and a workload) would measure now: "auto", hardware with a
    lower precision, and no choice remembered yet (in `memo`, or on disk with `persist`). Asks the same
    memos as `resolve`, so call it under the same torch thread count (the disk key names it). A front end
    says that a run measures only when this is True (the measurement adds seconds to the first run)."""
    if precision != "auto":
        return False
    lower = candidates(device)
    if not lower or (memo is not None and ("precision", *key) in memo):
        return False
    return not (persist and _read_disk(_disk_key(key, device)) in ["fp32", *lower])


def resolve(precision: str, device: torch.device | str, workload: Callable[[str], Callable[[], object]] | None = None,
            memo: dict | None = None, key: tuple = (), timer: Callable[[], float] = time.perf_counter,
            persist: bool = False) -> str:
    """A concrete precision: `precision` itself, or for "auto" the measured fastest supported one.

    workload(precision) returns a callable that runs one representative pass in that precision (e.g.
    the suffix forward and backward on a batch); without one, "auto" means fp32. `memo` keeps the
    decision under ("precision", *key); with `persist` it is also kept on disk (IBA_CACHE_DIR), keyed
    by the machine, so separate processes (CLI calls) measure once.
    """
    if precision != "auto":
        reason = unsupported(precision, device)
        if reason:
            raise UserError(f"{precision} is not available here: {reason}.")
        return precision
    memo_key = ("precision", *key)
    lower = candidates(device)
    if not lower:
        if memo is not None:
            memo[memo_key] = "fp32"  # nothing to measure on this hardware: fp32 is the choice, recorded alike
        return "fp32"
    if workload is None:
        return "fp32"
    if memo is not None and memo_key in memo:
        return memo[memo_key]
    disk_key = _disk_key(key, device)
    best = _read_disk(disk_key) if persist else None
    if best not in ["fp32", *lower]:
        best, _ = fastest({p: workload(p) for p in ["fp32", *lower]}, timer=timer)
        if persist:
            _write_disk(disk_key, best)
    if memo is not None:
        memo[memo_key] = best
    return best
