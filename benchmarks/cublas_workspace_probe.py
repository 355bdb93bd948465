"""What PyTorch's cuBLAS / cuBLASLt workspaces add to the caching allocator's allocated bytes.

The small model's step on one H200 planned 64.6 MB and the allocator peaked at 132.0 MB
(2026-12-04, 35c6c0c); the gap was the same 64 MiB + ~259 KB with and without CPU offload. This
prints the allocated bytes after each first use of a GEMM path (per stream, under CUDA graph
capture) so the fixed part can be named. Run on the GPU machine: python3 cublas_workspace_probe.py
"""
import os

import torch

MiB = 1 << 20


def allocated():
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def main():
    print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())
    for var in ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE", "TORCH_CUBLASLT_UNIFIED_WORKSPACE",
                "TORCH_BLAS_PREFER_CUBLASLT"):
        print(f"  {var}={os.environ.get(var, '(unset)')}")
    print("  preferred_blas_library:", torch.backends.cuda.preferred_blas_library())
    x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(256, device="cuda", dtype=torch.bfloat16)
    xf = x.float()
    last = allocated()

    def step(what, fn):
        nonlocal last
        out = fn()
        del out
        now = allocated()
        print(f"{what:55s} +{(now - last) / MiB:9.4f} MiB (allocated {now} B)")
        last = now

    step("bf16 mm, current stream", lambda: x @ x)
    step("bf16 mm again", lambda: x @ x)
    step("bf16 addmm (bias), current stream", lambda: torch.addmm(bias, x, x))
    step("bf16 linear (bias), current stream", lambda: torch.nn.functional.linear(x, x, bias))
    step("fp32 mm, current stream", lambda: xf @ xf)
    step("bf16 bmm, current stream", lambda: torch.bmm(x[None], x[None]))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        step("bf16 mm, a second stream", lambda: x @ x)
        step("bf16 addmm, a second stream", lambda: torch.addmm(bias, x, x))
    graph = torch.cuda.CUDAGraph()
    capture_stream = torch.cuda.Stream()
    with torch.cuda.stream(capture_stream):
        y = x @ x  # the capture stream's first GEMM outside capture
    del y
    step("(first mm on the capture stream, eager)", lambda: None)
    with torch.cuda.graph(graph, stream=capture_stream):
        y = torch.addmm(bias, x, x)
    step("bf16 addmm captured in a CUDA graph (output kept)", lambda: None)
    del y, graph
    step("after the graph is freed", lambda: None)
    with torch.cuda.graph(torch.cuda.CUDAGraph()):
        z = x @ x
    step("mm captured on torch.cuda.graph's own stream", lambda: None)
    del z
    snapshot = torch.cuda.memory_snapshot()
    big = [b["size"] for seg in snapshot for b in seg["blocks"] if b["state"] == "active_allocated" and b["size"] >= MiB]
    print("active blocks >= 1 MiB:", sorted(big))


if __name__ == "__main__":
    main()
