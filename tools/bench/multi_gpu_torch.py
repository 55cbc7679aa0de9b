"""The peer of tools/bench/multi_gpu.lua: the same sharded GEMMs with torch and
NCCL, one process per GPU (started by torchrun, or by the bench itself with
RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT), without overlap: the GEMM then
the all-reduce (row-parallel), the all-gather then the GEMM (column-parallel);
and the one-GPU GEMM on rank 0. Prints, on rank 0, one line per figure:

    torch <M>x<N>x<K> <name> <milliseconds>

NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and the others, set here too
unless already set, before torch.distributed starts NCCL).
"""
import os
import sys

for key, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(key, value)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def best_ms(fn, reps=5, iters=3):
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / iters)
    return best


def main():
    shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1].split(",")]
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))
    torch.cuda.set_device(local)
    try:  # device_id (torch >= 2.3) binds the communicator to the device at once
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    except TypeError:
        dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local)
    for m, nn, k in shapes:
        tag = f"{m}x{nn}x{k}"
        out = {}
        if rank == 0:
            a = torch.rand(m, k, device=dev, dtype=torch.bfloat16) * 2 - 1
            b = torch.rand(nn, k, device=dev, dtype=torch.bfloat16) * 2 - 1
            torch.matmul(a, b.t())
            torch.cuda.synchronize()
            ts = []
            for _ in range(5):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(3):
                    torch.matmul(a, b.t())
                e1.record()
                e1.synchronize()
                ts.append(e0.elapsed_time(e1) / 3)
            out["one"] = min(ts)
            del a, b
        dist.barrier()
        ar = torch.rand(m, k // n, device=dev, dtype=torch.bfloat16)
        br = torch.rand(nn, k // n, device=dev, dtype=torch.bfloat16)
        d = torch.empty(m, nn, device=dev, dtype=torch.bfloat16)

        def row():
            torch.matmul(ar, br.t(), out=d)
            dist.all_reduce(d)

        out["row"] = best_ms(row)
        del ar, br, d
        ac = torch.rand(m // n, k, device=dev, dtype=torch.bfloat16)
        bc = torch.rand(nn // n, k, device=dev, dtype=torch.bfloat16)
        g = torch.empty(m, k, device=dev, dtype=torch.bfloat16)
        dc = torch.empty(m, nn // n, device=dev, dtype=torch.bfloat16)

        def column():
            dist.all_gather_into_tensor(g, ac)
            torch.matmul(g, bc.t(), out=dc)

        out["column"] = best_ms(column)
        del ac, bc, g, dc
        if rank == 0:
            for name, ms in out.items():
                print(f"torch {tag} {name} {ms:.4f}", flush=True)
    buf = torch.zeros((1 << 30) // 2, device=dev, dtype=torch.bfloat16)
    ms = best_ms(lambda: dist.all_reduce(buf), 3, 3)
    if rank == 0:
        print(f"torch all_reduce {1 << 30} {ms:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
