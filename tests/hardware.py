"""Kinds of machine the suite must pass on, faked through `iba_core.precision.cpu_flags`."""
from __future__ import annotations

#: CPU feature flags of the kinds of machine the tests must hold on (a subset of /proc/cpuinfo's flags).
CPU_KINDS = {
    "avx2": {"sse4_2", "avx", "avx2", "fma"},
    "avx512": {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni"},
    "avx512_bf16": {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_bf16"},
    "amx": {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
            "amx_int8"},
}
HAS_BF16 = {"avx2": False, "avx512": False, "avx512_bf16": True, "amx": True}
