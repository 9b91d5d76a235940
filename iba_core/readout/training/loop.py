"""The training loop (paper §3.3): train, checkpoint, resume exactly where a run stopped.

Loss per batch: CE(noisy logits, label) + β·L_I with β = beta_k / k (paper: β = 10/k, Adam,
lr 1e-5, batch 16, 10 epochs, σ_s = 1). Only the readout network is trained; the analysed network
stays frozen in eval mode.

Checkpoints (rank 0 only) hold everything needed to continue: weights, optimiser, position (epoch,
step), the RNG states, the configuration, the history and the unfinished epoch's sums. The noise of
each step is seeded per (seed, epoch, step, rank), so an interrupted and resumed run ends with the
same weights as an uninterrupted one.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ...model_state import frozen_eval
from ...networks import load_network
from ..bottleneck import ReadoutBottleneck
from ..checkpoints import load_checkpoint, make_checkpoint, readout_from_checkpoint, save_checkpoint, state_digest
from ..config import ReadoutCheckpointError
from .config import TrainConfig
from .data import SkipSampler, build_dataset
from .distributed import DistInfo, all_sum, broadcast_module, setup_distributed, teardown_distributed
from .preview import preview_image, save_preview
from .statistics import compute_statistics

# --------------------------------------------------------------------------------------------
# Seeds and RNG state.


def _step_seed(seed: int, epoch: int, step: int, rank: int) -> int:
    digest = hashlib.sha256(f"noise:{seed}:{epoch}:{step}:{rank}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _rng_state() -> dict:
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": [list(x) if isinstance(x, tuple) else x for x in random.getstate()],
    }


def _set_rng_state(state: dict) -> None:
    if not state:
        return
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    npst = state["numpy"]
    np.random.set_state(("MT19937", npst["keys"].numpy().astype(np.uint32), npst["pos"], npst["has_gauss"],
                         npst["cached_gaussian"]))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))


# --------------------------------------------------------------------------------------------
# Training.


def train_readout(
    cfg: TrainConfig,
    *,
    resume: str | os.PathLike | None = None,
    overrides: Sequence[str] | None = None,
    network=None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Train (or resume training) a Readout Bottleneck; returns a summary for this rank.

    On resume the checkpoint's configuration is used; `overrides` names the fields of `cfg` to apply
    on top (default: the fields of `cfg` that differ from TrainConfig's defaults); only those in
    `config.RESUME_OVERRIDABLE` can change (e.g. more epochs, another output folder, a moved image folder).
    Others (lr, batch size, β, layers, …) cannot change mid-run and are ignored with a warning.

    network: an already loaded network to reuse (must match cfg.model and cfg.weights); by default
    it is loaded from cfg.
    """
    if log is None:
        def log(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)
    ckpt = None
    if resume is not None:
        ckpt = load_checkpoint(resume)
        training = ckpt.get("training") or {}
        if "optimizer" not in training or "config" not in training:
            raise ReadoutCheckpointError(
                f"{resume} holds no optimiser state (an exported, inference-only checkpoint); it cannot be resumed."
            )
        cfg = cfg.resumed(TrainConfig.from_dict(training["config"]), overrides)
    cfg.validate()
    di = setup_distributed(cfg.device)
    say = log if di.main else (lambda msg: None)
    try:
        return _train(cfg, ckpt, resume, di, progress and di.main, say, network)
    finally:
        teardown_distributed(di)


def _train(cfg: TrainConfig, ckpt: dict | None, resume, di: DistInfo, progress: bool, say, network=None) -> dict:
    from tqdm import tqdm

    if network is None:
        network = load_network(cfg.model, weights=cfg.weights, device=di.device)
    elif network.key != cfg.model or (cfg.weights in ("random",) and network.weights_id != "random") \
            or network.device != di.device:
        raise ValueError(f"The network passed in ({network.key}, {network.weights_id}, {network.device}) does not "
                         f"match the run's settings ({cfg.model}, {cfg.weights}, {di.device}).")
    dataset = build_dataset(cfg, network)
    say(f"data: {dataset.describe()}")
    history: list[dict] = []
    curve: list[list[float]] = []
    epoch0 = step0 = global_step = 0
    seconds0 = 0.0
    if ckpt is not None:
        rb = readout_from_checkpoint(ckpt, network, str(resume)).train()
        tr = ckpt["training"]
        epoch0, step0, global_step = int(tr["epoch"]), int(tr["step"]), int(tr["global_step"])
        history, curve = list(tr.get("history", [])), [list(c) for c in tr.get("curve", [])]
        seconds0 = float(tr.get("seconds", 0.0))
        _set_rng_state(tr.get("rng", {}))
        say(f"resuming from {resume}: epoch {epoch0 + 1}, step {step0}")
    else:
        torch.manual_seed(cfg.seed)  # the readout's initial weights
        rb = ReadoutBottleneck.create(network, cfg.layer, cfg.reads, hidden=cfg.hidden, sigma=cfg.sigma,
                                      beta_k=cfg.beta_k)
        if di.main:
            compute_statistics(rb, network, cfg, say)
    if di.distributed:
        broadcast_module(rb)  # rank 0's statistics (and, on resume, identical weights) everywhere
    rb.train()
    model = rb
    if di.distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(rb, device_ids=[di.device.index] if di.device.type == "cuda" else None,
                    broadcast_buffers=False)
    optimiser = torch.optim.Adam(rb.parameters(), lr=cfg.lr)
    if ckpt is not None:
        optimiser.load_state_dict(ckpt["training"]["optimizer"])

    out_dir = Path(cfg.out).expanduser()
    preview_crop = preview_image(cfg, dataset, network) if di.main else None
    sampler = DistributedSampler(dataset, num_replicas=di.world, rank=di.rank, shuffle=True, seed=cfg.seed)
    steps_per_epoch = -(-len(sampler) // cfg.batch_size)
    if cfg.max_steps:
        steps_per_epoch = min(steps_per_epoch, cfg.max_steps)
    say(f"readout: {rb.config.model}/{rb.config.layer} reading {', '.join(rb.config.reads)}; "
        f"{sum(p.numel() for p in rb.parameters())} parameters; {di.world} process(es); "
        f"{steps_per_epoch} steps/epoch of {cfg.batch_size} per process; lr {cfg.lr}, β·k {rb.config.beta_k}")

    def checkpoint(epoch: int, step: int, name: str, seconds: float, partial: list | None = None) -> Path | None:
        """Rank 0 writes everything needed to continue: weights, optimiser, position, RNG, config, history."""
        if not di.main:
            return None
        training = {
            "epoch": epoch, "step": step, "global_step": global_step, "complete": step == 0,
            "optimizer": optimiser.state_dict(), "rng": _rng_state(), "config": cfg.to_dict(),
            "history": history, "curve": curve, "seconds": seconds, "world_size": di.world,
            "data": dataset.describe(),
            # sums (loss·n, ce·n, info·n, n) of the unfinished epoch's steps, so its history entry stays whole
            "epoch_totals": [t.clone() for t in partial] if step and partial else [],
        }
        ck = make_checkpoint(rb, training)
        path = save_checkpoint(out_dir / name, ck)
        if name != "readout_last.pt":
            save_checkpoint(out_dir / "readout_last.pt", ck)
        return path

    if di.main and ckpt is None:
        with frozen_eval(*rb.network_modules):
            save_preview(rb, preview_crop, out_dir / "preview_epoch000.png", "before training")
    resumed_totals = None
    if ckpt is not None and ckpt["training"].get("epoch_totals") and di.main:
        resumed_totals = [t.to(torch.float64) for t in ckpt["training"]["epoch_totals"]]
    samples_seen = 0
    last_path = None
    start = time.perf_counter()
    epoch, step = epoch0, step0
    totals = window = torch.zeros(4, dtype=torch.float64)
    with frozen_eval(*rb.network_modules):
        try:
            for epoch in range(epoch0, cfg.epochs):
                skip = step0 if epoch == epoch0 else 0
                sampler.set_epoch(epoch)
                dataset.set_epoch(epoch)
                loader = DataLoader(dataset, batch_size=cfg.batch_size, num_workers=cfg.workers,
                                    sampler=SkipSampler(sampler, skip * cfg.batch_size),
                                    pin_memory=di.device.type == "cuda")
                # loss·n, ce·n, info·n, n of this epoch; on resume, rank 0 carries the steps done before
                totals = torch.zeros(4, dtype=torch.float64)
                window = torch.zeros(4, dtype=torch.float64)  # rank 0's running loss curve
                if skip and resumed_totals is not None:
                    totals, window = resumed_totals[0].clone(), resumed_totals[1].clone()
                bar = tqdm(total=steps_per_epoch, initial=min(skip, steps_per_epoch), unit="step",
                           desc=f"epoch {epoch + 1}/{cfg.epochs}", disable=not progress, file=sys.stderr,
                           dynamic_ncols=True)
                step = skip
                for x, labels in loader:
                    if step >= steps_per_epoch:
                        break
                    x, labels = x.to(di.device, non_blocking=True), labels.to(di.device)
                    gen = torch.Generator(device=di.device).manual_seed(_step_seed(cfg.seed, epoch, step, di.rank))
                    optimiser.zero_grad(set_to_none=True)
                    out = model(x, labels, gen)
                    out.loss.backward()
                    optimiser.step()
                    step += 1
                    global_step += 1
                    n = x.shape[0]
                    samples_seen += n
                    vals = torch.tensor([out.loss.item() * n, out.ce.item() * n, out.info.item() * n, n],
                                        dtype=torch.float64)
                    totals += vals
                    window += vals
                    if cfg.log_every and step % cfg.log_every == 0:
                        w = window / window[3]
                        curve.append([global_step, float(w[0]), float(w[1]), float(w[2])])
                        window.zero_()
                    t = totals / totals[3]
                    bar.set_postfix(loss=f"{t[0]:.3f}", ce=f"{t[1]:.3f}", L_I=f"{t[2]:.4g}")
                    bar.update(1)
                    if cfg.save_every and step % cfg.save_every == 0 and step < steps_per_epoch:
                        last_path = checkpoint(epoch, step, "readout_last.pt", seconds0 + time.perf_counter() - start,
                                               [all_sum(totals, di), window])
                bar.close()
                totals = all_sum(totals, di)
                t = totals / totals[3].clamp_min(1)
                entry = {
                    "epoch": epoch + 1, "loss": float(t[0]), "ce": float(t[1]), "info_nats": float(t[2]),
                    "beta_info": float(t[2]) * rb.config.beta,
                    "info_bits_per_element": float(t[2]) / rb.config.k / math.log(2),
                    "samples": int(totals[3]), "seconds": round(seconds0 + time.perf_counter() - start, 2),
                }
                step = 0
                if di.main:
                    entry["preview"] = save_preview(rb, preview_crop, out_dir / f"preview_epoch{epoch + 1:03d}.png",
                                                    f"epoch {epoch + 1}")
                history.append(entry)
                say(f"epoch {epoch + 1}: loss {entry['loss']:.4f}  ce {entry['ce']:.4f}  "
                    f"L_I {entry['info_nats']:.1f} nats ({entry['info_bits_per_element']:.3f} bits/element)")
                last_path = checkpoint(epoch + 1, 0, f"readout_epoch{epoch + 1:03d}.pt", entry["seconds"])
                if di.main:
                    (out_dir / "history.json").write_text(json.dumps(history, indent=1))
        except KeyboardInterrupt:
            # Not a collective: under DDP the unfinished epoch's sums are rank 0's only (an approximation).
            path = checkpoint(epoch, step, "readout_last.pt", seconds0 + time.perf_counter() - start,
                              [totals, window])
            if path is not None:
                say(f"interrupted: saved {path}; continue with --resume {path}")
            raise
    return {
        "event": "done", "rank": di.rank, "world_size": di.world, "epochs": cfg.epochs,
        "global_step": global_step, "samples_seen": samples_seen,
        "weights_sha256": state_digest(rb),
        "checkpoint": str(last_path) if last_path else None,
        "history": history if di.main else None,
    }
