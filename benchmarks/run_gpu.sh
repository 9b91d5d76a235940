#!/usr/bin/env bash
# Where a GPU is lent: the CUDA-marked tests and the GPU benchmarks, logs into ${OUT:-gpu-logs}/.
#   bash benchmarks/run_gpu.sh [tests|bench|sweep|eval|metrics|all]
# Packages the GPU machine lacks may be carried as wheels in .whl/ (see the device tool's README).
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS=${OUT:-gpu-logs}; mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 IBA_CACHE_DIR=${IBA_CACHE_DIR:-/tmp/iba-cache}
what=${1:-all}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOGS/gpu.txt"
python3 -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)" | tee -a "$LOGS/gpu.txt"
if [[ $what == tests || $what == all ]]; then
  python3 -m pytest -m cuda -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tee "$LOGS/cuda_tests.txt"
  python3 -c "from skimage import data; from PIL import Image; Image.fromarray(data.chelsea()).save('/tmp/chelsea.png')"
  python3 -m iba_core attribute /tmp/chelsea.png --device cuda --precision auto 2>&1 | tail -25 | tee "$LOGS/cli_attribute.txt"
fi
if [[ $what == bench || $what == all ]]; then
  python3 benchmarks/bench_per_sample.py --device cuda --no-memory --repeats 5 2>&1 | tee "$LOGS/bench_per_sample.txt"
  python3 benchmarks/bench_per_sample.py --device cuda --batched --sizes 1,4,16,64 --models resnet50,efficientnet_lite0 2>&1 | tee "$LOGS/bench_batched.txt"
  python3 benchmarks/bench_per_sample.py --device cuda --sweep --repeats 5 2>&1 | tee "$LOGS/bench_sweep.txt"
  # folder runs (issue 22): ResNet-50 Per-Sample (goal ≥ 100 images/s) and the Readout (goal ≥ 1,000 images/s)
  python3 benchmarks/bench_folder.py --model resnet50 --weights random --device cuda --images 512 --batch-images 64 \
    --precision auto 2>&1 | tee "$LOGS/bench_folder.txt"
  # concepts (issue 41): seconds and peak memory per 1,000 images, NMF and the streamed MiniBatchNMF
  python3 benchmarks/bench_concepts.py --device cuda --images 512 --stream 2>&1 | tee "$LOGS/bench_concepts.txt"
fi
if [[ $what == sweep || $what == all ]]; then
  python3 benchmarks/bench_per_sample.py --device cuda --sweep --repeats 5 --models resnet50 --compile default,reduce-overhead 2>&1 | tee "$LOGS/bench_compile.txt"
fi
if [[ $what == eval || $what == all ]]; then
  python3 benchmarks/bench_evaluate.py --device cuda --precisions fp32,auto 2>&1 | tee "$LOGS/bench_evaluate.txt"
  python3 benchmarks/bench_evaluate.py --device cuda --precisions fp32,auto --batch-size 256 2>&1 | tee "$LOGS/bench_evaluate_256.txt"
fi
if [[ $what == metrics || $what == all ]]; then
  # issue 29: the field's yardsticks should cost ≤ 0.5 s per image on an H100-class GPU
  python3 benchmarks/bench_yardsticks.py --model resnet50 --weights random --device cuda --precision auto 2>&1 | tee "$LOGS/bench_yardsticks_resnet50.txt"
  python3 benchmarks/bench_yardsticks.py --device cuda --precision auto 2>&1 | tee "$LOGS/bench_yardsticks_lite0.txt"
fi
