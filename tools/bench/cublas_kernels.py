#!/usr/bin/env python3
"""tools/bench/cublas_kernels.py: which kernels cuBLAS runs for GEMM shapes (torch's
profiler, the same bf16 "TN" problem as tools/bench/gemm.lua: A M x K and B N x K,
both K-major, D = A B^T in bf16), and their time. The names encode cuBLAS's tile,
cluster and split-K / stream-K choice (e.g. nvjet_sm90_tst_256x128_64x4_1x2_..._splitK),
which tells what configuration a shape class needs.

  python3 tools/bench/cublas_kernels.py 256x10240x8192 3072x768x3072 ...
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile


def main(argv):
    shapes = [tuple(int(x) for x in s.split("x")) for s in argv]
    if not shapes:
        print(__doc__)
        return 2
    torch.manual_seed(0)
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            a @ b.t()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                a @ b.t()
            torch.cuda.synchronize()
        kernels = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                t = kernels.setdefault(e.name, [0, 0.0])
                t[0] += 1
                t[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        parts = [f"{name} x{c // 5} {tot / c:.2f} us" for name, (c, tot) in kernels.items()]
        print(f"{m}x{n}x{k}: " + " | ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
