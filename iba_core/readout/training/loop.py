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
from ...cache import write_atomic
from ..bottleneck import ReadoutBottleneck
from ..checkpoints import load_checkpoint, make_checkpoint, readout_from_checkpoint, save_checkpoint, state_digest
from ..config import ReadoutCheckpointError
from .config import TrainConfig
from .data import SkipSampler, build_dataset
from .distributed import DistInfo, all_sum, broadcast_module, setup_distributed, teardown_distributed
from .preview import preview_image, save_preview
from .readout_stats import compute_statistics

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
    trust=None,
    trust_pickle: bool = False,
) -> dict:
    """Train (or resume training) a Readout Bottleneck; returns a summary for this rank.

    On resume the checkpoint's configuration is used; `overrides` names the fields of `cfg` to apply
    on top (default: the fields of `cfg` that differ from TrainConfig's defaults); only those in
    `config.RESUME_OVERRIDABLE` can change (e.g. more epochs, another output folder, a moved image folder).
    Others (lr, batch size, β, layers, …) cannot change mid-run and are ignored with a warning.

    network: an already loaded network to reuse (must match cfg.model and cfg.weights); by default
    it is loaded from cfg, with what `trust` (an `iba_core.trust.Trust`) and `trust_pickle` allow (a
    model card's code, a pickled weights file: as `load_network`).
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
        load = dict(trust_pickle=trust_pickle) | ({} if trust is None else {"trust": trust})
        return _TrainingRun(cfg, ckpt, resume, di, progress and di.main, say, network, load).run()
    finally:
        teardown_distributed(di)


class _TrainingRun:
    """One training run in the order it happens: the network and data (`__init__`), the readout fresh or from
    its checkpoint (`_start_readout`), the optimiser and sampler (`_start_optimiser`), then epoch after epoch
    (`_run_epoch`: `_train_step` per batch, `_finish_epoch`), checkpoints (`checkpoint`) and, on Ctrl-C, a last
    checkpoint to resume from (`_save_interrupted`)."""

    def __init__(self, cfg: TrainConfig, ckpt: dict | None, resume, di: DistInfo, progress: bool, say,
                 network=None, load: dict | None = None):
        self.cfg, self.ckpt, self.resume, self.di, self.progress, self.say = cfg, ckpt, resume, di, progress, say
        self.network = self._check_network(network, load or {})
        self.dataset = build_dataset(cfg, self.network)
        say(f"data: {self.dataset.describe()}")
        self._start_readout()
        self._start_optimiser()

    def _check_network(self, network, load: dict):
        """The network to explain: `network` if it matches the run's settings, else loaded from them (with
        the `load_network` options in `load`: what the caller trusts)."""
        cfg, di = self.cfg, self.di
        if network is None:
            return load_network(cfg.model, weights=cfg.weights, device=di.device, **load)
        if network.key != cfg.model or (cfg.weights in ("random",) and network.weights_id != "random") \
                or network.device != di.device:
            raise ValueError(f"The network passed in ({network.key}, {network.weights_id}, {network.device}) does "
                             f"not match the run's settings ({cfg.model}, {cfg.weights}, {di.device}).")
        return network

    def _start_readout(self) -> None:
        """The readout (weights, position, history, RNG state) from the checkpoint, or a new one with its
        statistics; the same on every process; wrapped for DistributedDataParallel where there are several."""
        cfg, di, ckpt = self.cfg, self.di, self.ckpt
        self.history: list[dict] = []
        self.curve: list[list[float]] = []
        self.epoch0 = self.step0 = self.global_step = 0
        self.seconds0 = 0.0
        if ckpt is not None:
            self.rb = readout_from_checkpoint(ckpt, self.network, str(self.resume)).train()
            tr = ckpt["training"]
            self.epoch0, self.step0, self.global_step = int(tr["epoch"]), int(tr["step"]), int(tr["global_step"])
            self.history, self.curve = list(tr.get("history", [])), [list(c) for c in tr.get("curve", [])]
            self.seconds0 = float(tr.get("seconds", 0.0))
            _set_rng_state(tr.get("rng", {}))
            self.say(f"resuming from {self.resume}: epoch {self.epoch0 + 1}, step {self.step0}")
        else:
            torch.manual_seed(cfg.seed)  # the readout's initial weights
            self.rb = ReadoutBottleneck.create(self.network, cfg.layer, cfg.reads, hidden=cfg.hidden,
                                               sigma=cfg.sigma, beta_k=cfg.beta_k)
            if di.main:
                compute_statistics(self.rb, self.network, cfg, self.say)
        if di.distributed:
            broadcast_module(self.rb)  # rank 0's statistics (and, on resume, identical weights) everywhere
        self.rb.train()
        self.model = self.rb
        if di.distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.model = DDP(self.rb, device_ids=[di.device.index] if di.device.type == "cuda" else None,
                             broadcast_buffers=False)

    def _start_optimiser(self) -> None:
        """Adam (its state from the checkpoint on resume), the preview crop, the sampler and steps per epoch."""
        cfg, di, rb = self.cfg, self.di, self.rb
        self.optimiser = torch.optim.Adam(rb.parameters(), lr=cfg.lr)
        if self.ckpt is not None:
            self.optimiser.load_state_dict(self.ckpt["training"]["optimizer"])
        self.out_dir = Path(cfg.out).expanduser()
        self.preview_crop = preview_image(cfg, self.dataset, self.network) if di.main else None
        self.sampler = DistributedSampler(self.dataset, num_replicas=di.world, rank=di.rank, shuffle=True,
                                          seed=cfg.seed)
        self.steps_per_epoch = -(-len(self.sampler) // cfg.batch_size)
        if cfg.max_steps:
            self.steps_per_epoch = min(self.steps_per_epoch, cfg.max_steps)
        self.say(f"readout: {rb.config.model}/{rb.config.layer} reading {', '.join(rb.config.reads)}; "
                 f"{sum(p.numel() for p in rb.parameters())} parameters; {di.world} process(es); "
                 f"{self.steps_per_epoch} steps/epoch of {cfg.batch_size} per process; lr {cfg.lr}, "
                 f"β·k {rb.config.beta_k}")

    def checkpoint(self, epoch: int, step: int, name: str, seconds: float,
                   partial: list | None = None) -> Path | None:
        """Rank 0 writes everything needed to continue: weights, optimiser, position, RNG, config, history."""
        if not self.di.main:
            return None
        training = {
            "epoch": epoch, "step": step, "global_step": self.global_step, "complete": step == 0,
            "optimizer": self.optimiser.state_dict(), "rng": _rng_state(), "config": self.cfg.to_dict(),
            "history": self.history, "curve": self.curve, "seconds": seconds, "world_size": self.di.world,
            "data": self.dataset.describe(),
            # sums (loss·n, ce·n, info·n, n) of the unfinished epoch's steps, so its history entry stays whole
            "epoch_totals": [t.clone() for t in partial] if step and partial else [],
        }
        ck = make_checkpoint(self.rb, training)
        path = save_checkpoint(self.out_dir / name, ck)
        if name != "readout_last.pt":
            save_checkpoint(self.out_dir / "readout_last.pt", ck)
        return path

    def _seconds(self) -> float:
        """Training time so far, the resumed run's included."""
        return self.seconds0 + time.perf_counter() - self.start

    def run(self) -> dict:
        """Train from where the run stands to cfg.epochs; the summary for this rank."""
        cfg, di = self.cfg, self.di
        if di.main and self.ckpt is None:
            with frozen_eval(*self.rb.network_modules):
                save_preview(self.rb, self.preview_crop, self.out_dir / "preview_epoch000.png", "before training")
        self.resumed_totals = None
        if self.ckpt is not None and self.ckpt["training"].get("epoch_totals") and di.main:
            self.resumed_totals = [t.to(torch.float64) for t in self.ckpt["training"]["epoch_totals"]]
        self.samples_seen = 0
        self.last_path = None
        self.start = time.perf_counter()
        self.epoch, self.step = self.epoch0, self.step0
        self.totals = self.window = torch.zeros(4, dtype=torch.float64)
        with frozen_eval(*self.rb.network_modules):
            try:
                for epoch in range(self.epoch0, cfg.epochs):
                    self.epoch = epoch
                    self._run_epoch(epoch)
            except KeyboardInterrupt:
                self._save_interrupted()
                raise
        return {
            "event": "done", "rank": di.rank, "world_size": di.world, "epochs": cfg.epochs,
            "global_step": self.global_step, "samples_seen": self.samples_seen,
            "weights_sha256": state_digest(self.rb),
            "checkpoint": str(self.last_path) if self.last_path else None,
            "history": self.history if di.main else None,
        }

    def _run_epoch(self, epoch: int) -> None:
        """The steps of one epoch (on resume, from where it stopped), then its history entry and checkpoint."""
        from tqdm import tqdm

        cfg, di = self.cfg, self.di
        skip = self.step0 if epoch == self.epoch0 else 0
        self.sampler.set_epoch(epoch)
        self.dataset.set_epoch(epoch)
        loader = DataLoader(self.dataset, batch_size=cfg.batch_size, num_workers=cfg.workers,
                            sampler=SkipSampler(self.sampler, skip * cfg.batch_size),
                            pin_memory=di.device.type == "cuda")
        # loss·n, ce·n, info·n, n of this epoch; on resume, rank 0 carries the steps done before
        self.totals = torch.zeros(4, dtype=torch.float64)
        self.window = torch.zeros(4, dtype=torch.float64)  # rank 0's running loss curve
        if skip and self.resumed_totals is not None:
            self.totals, self.window = self.resumed_totals[0].clone(), self.resumed_totals[1].clone()
        bar = tqdm(total=self.steps_per_epoch, initial=min(skip, self.steps_per_epoch), unit="step",
                   desc=f"epoch {epoch + 1}/{cfg.epochs}", disable=not self.progress, file=sys.stderr,
                   dynamic_ncols=True)
        self.step = skip
        for x, labels in loader:
            if self.step >= self.steps_per_epoch:
                break
            self._train_step(epoch, x, labels)
            t = self.totals / self.totals[3]
            bar.set_postfix(loss=f"{t[0]:.3f}", ce=f"{t[1]:.3f}", L_I=f"{t[2]:.4g}")
            bar.update(1)
            if cfg.save_every and self.step % cfg.save_every == 0 and self.step < self.steps_per_epoch:
                self.last_path = self.checkpoint(epoch, self.step, "readout_last.pt", self._seconds(),
                                                 [all_sum(self.totals, di), self.window])
        bar.close()
        self._finish_epoch(epoch)

    def _train_step(self, epoch: int, x: torch.Tensor, labels: torch.Tensor) -> None:
        """One Adam step on a batch, its noise seeded by (seed, epoch, step, rank); the sums and loss curve."""
        cfg, di = self.cfg, self.di
        x, labels = x.to(di.device, non_blocking=True), labels.to(di.device)
        gen = torch.Generator(device=di.device).manual_seed(_step_seed(cfg.seed, epoch, self.step, di.rank))
        self.optimiser.zero_grad(set_to_none=True)
        out = self.model(x, labels, gen)
        out.loss.backward()
        self.optimiser.step()
        self.step += 1
        self.global_step += 1
        n = x.shape[0]
        self.samples_seen += n
        vals = torch.tensor([out.loss.item() * n, out.ce.item() * n, out.info.item() * n, n], dtype=torch.float64)
        self.totals += vals
        self.window += vals
        if cfg.log_every and self.step % cfg.log_every == 0:
            w = self.window / self.window[3]
            self.curve.append([self.global_step, float(w[0]), float(w[1]), float(w[2])])
            self.window.zero_()

    def _finish_epoch(self, epoch: int) -> None:
        """The epoch's history entry (sums over all processes), its preview, its checkpoint and history.json."""
        di, rb = self.di, self.rb
        totals = all_sum(self.totals, di)
        self.totals = totals
        t = totals / totals[3].clamp_min(1)
        entry = {
            "epoch": epoch + 1, "loss": float(t[0]), "ce": float(t[1]), "info_nats": float(t[2]),
            "beta_info": float(t[2]) * rb.config.beta,
            "info_bits_per_element": float(t[2]) / rb.config.k / math.log(2),
            "samples": int(totals[3]), "seconds": round(self._seconds(), 2),
        }
        self.step = 0
        if di.main:
            entry["preview"] = save_preview(rb, self.preview_crop, self.out_dir / f"preview_epoch{epoch + 1:03d}.png",
                                            f"epoch {epoch + 1}")
        self.history.append(entry)
        self.say(f"epoch {epoch + 1}: loss {entry['loss']:.4f}  ce {entry['ce']:.4f}  "
                 f"L_I {entry['info_nats']:.1f} nats ({entry['info_bits_per_element']:.3f} bits/element)")
        self.last_path = self.checkpoint(epoch + 1, 0, f"readout_epoch{epoch + 1:03d}.pt", entry["seconds"])
        if di.main:
            text = json.dumps(self.history, indent=1)
            write_atomic(self.out_dir / "history.json", lambda tmp: tmp.write_text(text))

    def _save_interrupted(self) -> None:
        """On Ctrl-C: a checkpoint of the position reached, to resume from."""
        # Not a collective: under DDP the unfinished epoch's sums are rank 0's only (an approximation).
        path = self.checkpoint(self.epoch, self.step, "readout_last.pt", self._seconds(), [self.totals, self.window])
        if path is not None:
            self.say(f"interrupted: saved {path}; continue with --resume {path}")
