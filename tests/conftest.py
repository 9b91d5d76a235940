"""Shared fixtures: tiny hand-built networks, an isolated cache, the real offline model."""
from __future__ import annotations

import os

import pytest
import torch
from torch import nn


# .ci/run runs the suite in two pytest-xdist workers, one per core: each keeps to one torch thread (and so do the
# processes its tests start), so that no OpenMP thread waits for a sibling the other worker pushed off its core
# (see `one_thread`).
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread while a module's tests run (restored after it): use it as
    `pytestmark = pytest.mark.usefixtures("one_thread")`.

    The suite shares two cores with other jobs; with two OpenMP threads each of the many small operators
    waits for a descheduled sibling thread: a 32 px ResNet-50 forward+backward took 2.8 s instead of
    0.08 s in a measurement on this machine. Results do not depend on the thread count.
    """
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# Statistics used across the suite are small so it stays fast; tests that need accuracy ask for more.
TEST_STATS_SAMPLES = 96


def pytest_addoption(parser) -> None:
    from hardware import CPU_KINDS

    parser.addoption(
        "--cpu-kind", choices=sorted(CPU_KINDS), default=None,
        help="run the whole suite as if the CPU were this kind (faked feature flags, no GPU bf16): "
             "`bash .ci/run --cpu-kind avx2` checks an AVX2-only machine's path on any machine. "
             "Tests that start a separate process (CLI subprocess, browser) see the real CPU.",
    )


@pytest.fixture(scope="session", autouse=True)
def _faked_cpu_kind(request):
    """With --cpu-kind, iba_core.precision sees that CPU's flags (and no bf16 GPU) for the whole session."""
    kind = request.config.getoption("--cpu-kind")
    if kind is None:
        yield None
        return
    from hardware import CPU_KINDS
    from iba_core import precision

    patch = pytest.MonkeyPatch()
    patch.setattr(precision, "cpu_flags", lambda: set(CPU_KINDS[kind]))
    patch.setattr(precision, "cuda_bf16", lambda: False)
    yield kind
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Every test session writes its statistics and results into a fresh cache, never ~/.cache."""
    cache = tmp_path_factory.mktemp("iba-cache")
    old = os.environ.get("IBA_CACHE_DIR")
    os.environ["IBA_CACHE_DIR"] = str(cache)
    os.environ.setdefault("IBA_STATS_SAMPLES", str(TEST_STATS_SAMPLES))
    yield cache
    if old is None:
        os.environ.pop("IBA_CACHE_DIR", None)
    else:
        os.environ["IBA_CACHE_DIR"] = old


class TinyNet(nn.Module):
    """conv → BN → ReLU → conv (the bottleneck layer) → ReLU → pool → linear, 5 classes."""

    def __init__(self, channels: int = 4, classes: int = 5):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.relu2 = nn.ReLU(inplace=True)  # in-place, as in VGG: R must not be altered by it
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def prefix(self) -> nn.Sequential:
        return nn.Sequential(self.conv1, self.bn, self.relu1, self.conv2)

    def suffix(self) -> nn.Sequential:
        return nn.Sequential(self.relu2, self.pool, nn.Flatten(), self.fc)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.suffix()(self.prefix()(x))


@pytest.fixture
def tiny_net() -> TinyNet:
    return TinyNet().eval()


@pytest.fixture
def tiny_stats(tiny_net):
    """Statistics of TinyNet's conv2 on random inputs (one dead channel forced to std 0)."""
    from iba_core.feature_stats import FeatureStats, estimate_stats

    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(16, 3, 8, 8, generator=g) for _ in range(4)]
    mean, std, n = estimate_stats(tiny_net.prefix(), batches)
    std[1] = 0.0
    return FeatureStats(mean, std, n, "tiny", "random", "conv2", "random noise")


@pytest.fixture(scope="session")
def offline_model():
    """The real pretrained offline network (EfficientNet-Lite0)."""
    from iba_core.networks import load_network

    return load_network("efficientnet_lite0")


@pytest.fixture(scope="session")
def offline_stats(offline_model):
    from iba_core.feature_stats import get_stats

    return get_stats(offline_model, offline_model.spec.default_layer, n=TEST_STATS_SAMPLES)


@pytest.fixture(scope="session")
def chelsea_x(offline_model):
    from iba_core.images import load_sample

    return offline_model.preprocess(load_sample("chelsea"))


@pytest.fixture
def build_devices(monkeypatch):
    """watch(cls) → a list that gets the default device's type each time a `cls` layer is made (e.g. nn.Linear): a
    test sees whether a network was built on the meta device only (the model-size cap) or for real."""
    def watch(cls: type[nn.Module]) -> list[str]:
        devices: list[str] = []
        original = cls.__init__

        def spy(self, *args, **kwargs):
            devices.append(torch.get_default_device().type)
            original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", spy)
        return devices

    return watch


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory):
    """A tiny random CLIP model saved as transformers saves one, with an offline tokenizer (`clip_fixtures`)."""
    from clip_fixtures import save_tiny_clip

    return save_tiny_clip(tmp_path_factory.mktemp("clip") / "tiny-clip")


@pytest.fixture(scope="module")
def clip_net(clip_folder):
    """The tiny CLIP model as a network (`clip:FOLDER`)."""
    from iba_core.networks import load_network

    return load_network(f"clip:{clip_folder}")
