"""Made-up results to draw: a bump of bits, a noisy photo, training steps, a run, attribution maps."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from PIL import Image

from iba_core.methods import AttributionMap
from iba_core.per_sample import AttributionResult, BottleneckSettings, StepInfo
from iba_core.render.animation import step_bits


def blob(size: int = 224, centre: tuple[int, int] = (80, 150)) -> np.ndarray:
    """A Gaussian bump of bits: many bits at `centre` (row, col), ~0 far away."""
    yy, xx = np.mgrid[:size, :size]
    return (2.0 * np.exp(-((yy - centre[0]) ** 2 + (xx - centre[1]) ** 2) / (2 * 20.0**2))).astype(np.float32)


def photo(size: int = 224) -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8), mode="RGB")


def history(steps: int = 4) -> list[StepInfo]:
    return [
        StepInfo(step=i, steps=steps, lambda_mean=np.full((28, 28), 0.5), bits_per_pixel=blob(),
                 ce=1.0 / i, info=100.0 / i, beta_info=0.2 / i, p_target=0.5 + 0.1 * i)
        for i in range(1, steps + 1)
    ]


def result() -> AttributionResult:
    heat = blob()
    return AttributionResult(
        heatmap=heat, feature_bits=np.ones((28, 28)), lambda_mean=np.full((28, 28), 0.5),
        total_bits=float(heat.sum()), target=285, p_without=0.35, p_with=np.float32(0.6), history=history(),
        seconds=1.5, settings=BottleneckSettings(beta_k=10.0, steps=4), feature_shape=(40, 28, 28),
    )


def amap(key, values, signed, unit="", seconds=0.5) -> AttributionMap:
    return AttributionMap(key, key.title(), np.asarray(values, dtype=np.float32), signed, unit, seconds)


def draining(steps: int = 10) -> list[StepInfo]:
    """A run whose bits drain away: step t has (1 - t/(steps+2)) of the first step's bits."""
    return [
        StepInfo(step=t, steps=steps, lambda_mean=np.full((14, 14), 1.0 - t / (steps + 2)),
                 bits_per_pixel=blob() * (1.0 - t / (steps + 2)), ce=2.0 / t, info=100.0 / t, beta_info=3.0 / t,
                 p_target=0.3 + 0.05 * t)
        for t in range(1, steps + 1)
    ]


def draining_result(steps: int = 10):
    """A finished run whose last step is its final map (as per_sample records it)."""
    history = draining(steps)
    res = result()
    return replace(res, history=history, heatmap=history[-1].bits_per_pixel, lambda_mean=history[-1].lambda_mean,
                   total_bits=step_bits(history[-1]))
