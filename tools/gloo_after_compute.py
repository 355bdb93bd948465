#!/usr/bin/env python3
"""How long Gloo collectives take back to back vs right after a burst of compute.

Two local processes (Debian's python3-torch 1.13 with Gloo), one intra-op thread each, as
examples:train runs on this 2-core machine; a layer's nine parameter all-gathers of the tiny
Llama step. Prints rank 0's mean and fastest of 10 timed rounds per mode. docs/passes.md
("Calibration by default") cites it: it is why the calibrator measures each collective after
as much compute as the step runs before it.

  /usr/bin/python3 tools/gloo_after_compute.py        # launches both ranks
"""
import subprocess
import sys
import time


def worker(rank: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    shapes = [(32,), (32, 64), (32, 64), (32, 64), (32, 64), (32,), (88, 64), (32, 176), (88, 64)]
    inputs = [torch.rand(s) for s in shapes]
    outputs = [[torch.empty(s) for _ in range(2)] for s in shapes]
    a, b = torch.rand(512, 64), torch.rand(64, 256)

    def compute(ms: float) -> None:
        start = time.perf_counter()
        while time.perf_counter() - start < ms / 1000:
            torch.softmax(a @ b, 1) @ b.t()

    for mode, ms in [("back to back", 0), ("after 30 ms of compute", 30), ("after 100 ms of compute", 100)]:
        times = []
        for _ in range(12):
            compute(ms)
            start = time.perf_counter()
            for i, o in zip(inputs, outputs):
                dist.all_gather(o, i)
            times.append(time.perf_counter() - start)
        times = times[2:]
        if rank == 0:
            print(f"{mode:24s} mean {1e3 * sum(times) / len(times):6.2f} ms  fastest {1e3 * min(times):6.2f} ms",
                  flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        worker(int(sys.argv[1]), int(sys.argv[2]))
    else:
        port = 29541
        ranks = [subprocess.Popen([sys.executable, __file__, str(r), str(port)]) for r in (0, 1)]
        sys.exit(max(p.wait() for p in ranks))
