"""Speed and memory of the Per-Sample Bottleneck against two straightforward loops.

The straightforward loop is what one writes first: a forward hook replaces the layer's output by Z,
and every step runs the whole network forward and backward — with parameter gradients on
("trainable"), or, as a careful user of the authors' library runs it, with the parameters frozen
("frozen"). The project's run executes the prefix once and only the suffix per step, without parameter
gradients, in the precision `auto` chooses (printed; "ours fp32" forces fp32).
The "floor" is the bare work of that design: the prefix once and T suffix passes (forward + input-gradient
backward) on B copies, with no noise, mask, loss bookkeeping or p(target) measurements; no attribution can
be faster with this network split, so it tells how much of the gap to the loop is left to win.

Runs alternate in one process so that both see the same machine state; medians are printed.

    python benchmarks/bench_per_sample.py            # all three networks, 3 repeats
    python benchmarks/bench_per_sample.py --models resnet50 --repeats 5
    python benchmarks/bench_per_sample.py --batched   # images/s for N = 1, 4, 16 images per run
    python benchmarks/bench_per_sample.py --device cuda --sweep --compile default,reduce-overhead
    python benchmarks/bench_per_sample.py --device cuda --batched --sizes 1,4,16,64
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

import torch

from iba_core.bottleneck import kl_per_element, lambda_from_alpha, standardise
from iba_core.networks import load_network
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck
from iba_core.precision import machine_id
from iba_core.feature_stats import FeatureStats, estimate_stats

CASES = {"resnet50": "conv3_4", "vgg16": "conv4_1", "efficientnet_lite0": "block3_2"}


class PeakRSS:
    """Peak resident memory above the starting level, sampled every 2 ms (CPU), or CUDA's peak."""

    def __init__(self, device: torch.device):
        self.device, self.peak = device, 0

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        self.base, self.peak, self._stop = self._rss(), self._rss(), False

        def sample():
            while not self._stop:
                self.peak = max(self.peak, self._rss())
                time.sleep(0.002)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()
        else:
            self._stop = True
            self._thread.join()
            self.peak = max(self.peak, self._rss())
        self.mb = (self.peak - self.base) / 2**20


def naive_loop(model, layer_module, x, target, stats, s: BottleneckSettings, trainable: bool = True) -> torch.Tensor:
    """The plain implementation: whole network every step, parameter gradients on (trainable) or off."""
    for p in model.parameters():
        p.requires_grad_(trainable)
    device = x.device  # tensors follow the network (CPU or GPU)
    mean, std = stats.mean[None].to(device), stats.floored_std()[None].to(device)
    alpha = None
    generator = torch.Generator(device=device)
    generator.manual_seed(s.seed)
    state = {}

    def hook(_m, _i, r):
        lam, one_minus = lambda_from_alpha(state["alpha"], s.sigma)
        eps = mean + std * torch.randn(r.shape, generator=generator, device=device)
        state["kl"] = kl_per_element(standardise(r, mean, std), lam, one_minus)
        return lam * r + one_minus * eps

    handle = layer_module.register_forward_hook(hook)
    try:
        xb = x.expand(s.batch, -1, -1, -1)
        labels = torch.full((s.batch,), target, device=device)
        k = stats.mean.numel()
        alpha = torch.full((1,) + tuple(stats.mean.shape), s.init_alpha, device=device, requires_grad=True)
        state["alpha"] = alpha
        opt = torch.optim.Adam([alpha], lr=s.lr)
        for _ in range(s.steps):
            opt.zero_grad()
            model.zero_grad()
            logits = model(xb)
            loss = torch.nn.functional.cross_entropy(logits, labels) + s.beta_k / k * state["kl"].mean(0).sum()
            loss.backward()
            opt.step()
        return state["kl"].detach()
    finally:
        handle.remove()
        for p in model.parameters():
            p.requires_grad_(False)
            p.grad = None


def floor_passes(prefix, suffix, x, s: BottleneckSettings) -> None:
    """Prefix once, then T × (suffix forward + backward to its input) on B copies: the design's minimum."""
    with torch.no_grad():
        r = prefix(x)
    z = r.expand(s.batch, *r.shape[1:]).contiguous(memory_format=torch.channels_last)
    for _ in range(s.steps):
        leaf = z.detach().requires_grad_(True)
        suffix(leaf.clone()).sum().backward()  # clone: a suffix may start with an in-place ReLU (VGG)


def _setup(key: str, device: torch.device):
    layer = CASES[key]
    network = load_network(key, weights="pretrained" if key == "efficientnet_lite0" else "random", device=device)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0)).to(device)
    mean, std, n = estimate_stats(network.prefix(layer), [torch.randn(4, 3, 224, 224)], device=device)
    stats = FeatureStats(mean.to(device), std.to(device), n)
    s = BottleneckSettings(steps=10, batch=10)
    ours = PerSampleBottleneck.for_network(network, layer, stats, s)
    ours32 = PerSampleBottleneck.for_network(network, layer, stats, BottleneckSettings(steps=10, batch=10, precision="fp32"))
    chosen = ours.attribute(x, 1).precision  # resolves "auto" once (measured), outside the timings
    module = network.hook_module(layer)
    prefix, suffix = network.fast_split(layer)
    return layer, chosen, {
        "ours": lambda: ours.attribute(x, 1),
        "ours_fp32": lambda: ours32.attribute(x, 1),
        "frozen": lambda: naive_loop(network.model, module, x, 1, stats, s, trainable=False),
        "naive": lambda: naive_loop(network.model, module, x, 1, stats, s),
        "floor": lambda: floor_passes(prefix, suffix, x, s),
    }


def bench_time(key: str, repeats: int, device: torch.device) -> dict:
    """Median seconds of alternating runs in this process."""
    layer, chosen, run = _setup(key, device)
    for fn in run.values():  # warm-up: allocator and oneDNN kernel caches
        fn()
    times = {name: [] for name in run}
    for _ in range(repeats):
        for name, fn in run.items():
            t0 = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(v) for name, v in times.items()}
    return {"model": key, "layer": layer, "precision": chosen, **{f"{k}_s": v for k, v in med.items()}}


def bench_memory(key: str, variant: str, device: torch.device) -> float:
    """Peak memory (MB) of one warm run of one variant, above what was in use before it."""
    _, _, run = _setup(key, device)
    run[variant]()
    with PeakRSS(device) as peak:
        run[variant]()
    return peak.mb


def _memory_in_child(key: str, variant: str, device: str) -> float:
    # A child process per measurement with glibc's mmap threshold fixed: otherwise glibc keeps freed
    # activations resident after the first run and a warm run's peak would read as 0. Timing runs
    # never use this setting, since it makes every large allocation slower.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    out = subprocess.run(
        [sys.executable, __file__, "--memory-of", key, variant, "--device", device],
        capture_output=True, text=True, env=env, check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def bench_batched(key: str, device: torch.device, sizes=(1, 4, 16), repeats: int = 2) -> list[tuple[int, float]]:
    """(N, images per second) for attribute_batch on N different images (the chosen precision)."""
    layer = CASES[key]
    network = load_network(key, weights="pretrained" if key == "efficientnet_lite0" else "random", device=device)
    mean, std, n = estimate_stats(network.prefix(layer), [torch.randn(4, 3, 224, 224)], device=device)
    iba = PerSampleBottleneck.for_network(network, layer, FeatureStats(mean.to(device), std.to(device), n),
                                          BottleneckSettings(steps=10, batch=10))
    out = []
    for size in sizes:
        x = torch.randn(size, 3, 224, 224, generator=torch.Generator().manual_seed(size)).to(device)
        iba.attribute_batch(x)  # warm-up: "auto" measures once per batch size; cuDNN picks its kernels
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            iba.attribute_batch(x)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        out.append((size, size / statistics.median(times)))
    return out


def bench_sweep(key: str, device: torch.device, repeats: int, compile_modes: list[str]) -> list[tuple[str, str, float]]:
    """(precision, how the suffix runs, median s per image) at N = 1: every precision the device supports,
    eager and, per `compile_modes`, the suffix under torch.compile ("default", "reduce-overhead" = CUDA graphs)."""
    from iba_core.precision import candidates

    layer = CASES[key]
    network = load_network(key, weights="pretrained" if key == "efficientnet_lite0" else "random", device=device)
    mean, std, n = estimate_stats(network.prefix(layer), [torch.randn(4, 3, 224, 224)], device=device)
    stats = FeatureStats(mean.to(device), std.to(device), n)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0)).to(device)
    prefix, suffix = network.fast_split(layer)
    rows = []
    for precision in ["fp32"] + candidates(device):
        settings = BottleneckSettings(steps=10, batch=10, precision=precision)
        for how in ["eager"] + compile_modes:
            try:
                if how == "eager":
                    iba = PerSampleBottleneck.for_network(network, layer, stats, settings)
                else:
                    torch._dynamo.reset()
                    compiled = torch.compile(suffix, mode=how, dynamic=False)
                    iba = PerSampleBottleneck.from_split(prefix, compiled, stats, settings)
                for _ in range(2):  # warm-up (compilation, cuDNN's algorithm search)
                    iba.attribute(x, 1)
                times = []
                for _ in range(repeats):
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    iba.attribute(x, 1)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    times.append(time.perf_counter() - t0)
                rows.append((precision, how, statistics.median(times)))
            except Exception as err:  # a compile mode that fails here is reported, not fatal
                rows.append((precision, f"{how} failed: {type(err).__name__}: {str(err)[:80]}", float("nan")))
            print(f"{key:<20}{layer:<10}{rows[-1][0]:>6}  {rows[-1][1]:<18}{rows[-1][2]:>9.4f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batched", action="store_true", help="images/s of batched attribution (N = 1, 4, 16)")
    parser.add_argument("--sizes", default="1,4,16", help="N for --batched (comma-separated)")
    parser.add_argument("--sweep", action="store_true",
                        help="s/image at N = 1 per supported precision, eager and with torch.compile (--compile)")
    parser.add_argument("--compile", default="", help="compile modes for --sweep, e.g. default,reduce-overhead")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurements")
    parser.add_argument("--memory-of", nargs=2, metavar=("MODEL", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.memory_of:
        print(bench_memory(args.memory_of[0], args.memory_of[1], device))
        return
    print(f"machine: {machine_id(device)}; device {device}")
    if args.sweep:
        print(f"{'model':<20}{'layer':<10}{'prec.':>6}  {'suffix':<18}{'s/image':>9}   (B=10, T=10, N=1, medians)")
        for key in (k.strip() for k in args.models.split(",")):
            bench_sweep(key, device, args.repeats, [m for m in args.compile.split(",") if m])
        return
    if args.batched:
        sizes = tuple(int(n) for n in args.sizes.split(","))
        print(f"{'model':<20}{'layer':<10}" + "".join(f"{f'N={n} img/s':>12}" for n in sizes))
        for key in (k.strip() for k in args.models.split(",")):
            rates = bench_batched(key, device, sizes)
            print(f"{key:<20}{CASES[key]:<10}" + "".join(f"{r:>12.2f}" for _, r in rates), flush=True)
        return
    print(f"B=10, T=10, {args.repeats} alternating repeats (medians); peak memory above baseline, one warm run each")
    print(f"{'model':<20}{'layer':<10}{'prec.':>6}{'ours s':>8}{'fp32 s':>8}{'frozen s':>9}{'train s':>9}"
          f"{'vs frozen':>10}{'vs train':>10}{'floor s':>9}{'ours MB':>9}{'frozen MB':>10}{'train MB':>10}")
    for key in (k.strip() for k in args.models.split(",")):
        r = bench_time(key, args.repeats, device)
        mem = ({} if args.no_memory else
               {v: _memory_in_child(key, v, args.device) for v in ("ours", "frozen", "naive")})
        print(f"{r['model']:<20}{r['layer']:<10}{r['precision']:>6}{r['ours_s']:>8.2f}{r['ours_fp32_s']:>8.2f}"
              f"{r['frozen_s']:>9.2f}{r['naive_s']:>9.2f}{r['frozen_s'] / r['ours_s']:>9.2f}x"
              f"{r['naive_s'] / r['ours_s']:>9.2f}x{r['floor_s']:>9.2f}"
              f"{mem.get('ours', float('nan')):>9.0f}{mem.get('frozen', float('nan')):>10.0f}"
              f"{mem.get('naive', float('nan')):>10.0f}", flush=True)


if __name__ == "__main__":
    main()
