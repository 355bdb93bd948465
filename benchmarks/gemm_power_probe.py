#!/usr/bin/env python3
"""The 953M Llama block's bf16 GEMMs on this GPU, one by one and merged, then one GEMM sustained.

  python3 benchmarks/gemm_power_probe.py

Prints a Markdown table (ms and TFLOP/s of each GEMM shape of the step's blocks: Q/K/V/O,
gate/up/down, forward and backward, separately and as one merged GEMM for QKV and gate+up),
then runs the gate+up GEMM back to back for ~2 s while sampling nvidia-smi (SM clock, power,
active throttle reasons), to show whether the GPU holds its clocks under a GEMM-bound load.
Needs PyTorch with CUDA (the GPU machine's python3). It showed the 953M step's GEMMs clock-bound under the power cap (2026-12-02, a089d0d).
"""
import torch, time, subprocess, sys
torch.backends.cuda.matmul.allow_tf32 = False
dev = 'cuda'
T, D, F = 8192, 2048, 5632
def t(fn, iters=50):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters): fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / iters
b = torch.bfloat16
x = torch.randn(T, D, device=dev, dtype=b)
W = {n: torch.randn(o, D, device=dev, dtype=b) * 0.02 for n, o in [('q', D), ('k', D), ('v', D), ('g', F), ('u', F)]}
Wd = torch.randn(D, F, device=dev, dtype=b) * 0.02
Wqkv = torch.cat([W['q'], W['k'], W['v']]); Wgu = torch.cat([W['g'], W['u']])
h = torch.randn(T, F, device=dev, dtype=b)
dq = torch.randn(T, D, device=dev, dtype=b); dqkv = torch.randn(T, 3 * D, device=dev, dtype=b)
dgu = torch.randn(T, 2 * F, device=dev, dtype=b); dg = dgu[:, :F].contiguous(); du = dgu[:, F:].contiguous()
def fl(m, n, k): return 2 * m * n * k
rows = []
def row(name, ms, flop): rows.append((name, ms, flop / ms / 1e9))
row('fwd q (x3 separately)', 3 * t(lambda: x @ W['q'].t()), 3 * fl(T, D, D))
row('fwd qkv merged', t(lambda: x @ Wqkv.t()), fl(T, 3 * D, D))
row('fwd o', t(lambda: dq @ W['q'].t()), fl(T, D, D))
row('fwd gate, up separately', t(lambda: x @ W['g'].t()) + t(lambda: x @ W['u'].t()), 2 * fl(T, F, D))
row('fwd gate+up merged', t(lambda: x @ Wgu.t()), fl(T, 2 * F, D))
row('fwd down', t(lambda: h @ Wd.t()), fl(T, D, F))
row('bwd dX qkv separately (3 mm + 2 add)', t(lambda: (dq @ W['q']) + (dq @ W['k']) + (dq @ W['v'])), 3 * fl(T, D, D))
row('bwd dX qkv merged', t(lambda: dqkv @ Wqkv), fl(T, D, 3 * D))
row('bwd dW qkv separately', 3 * t(lambda: dq.t() @ x), 3 * fl(D, D, T))
row('bwd dW qkv merged', t(lambda: dqkv.t() @ x), fl(3 * D, D, T))
row('bwd dX gate/up separately (2 mm + add)', t(lambda: (dg @ W['g']) + (du @ W['u'])), 2 * fl(T, D, F))
row('bwd dX gate/up merged', t(lambda: dgu @ Wgu), fl(T, D, 2 * F))
row('bwd dW gate/up separately', 2 * t(lambda: dg.t() @ x), 2 * fl(F, D, T))
row('bwd dW gate/up merged', t(lambda: dgu.t() @ x), fl(2 * F, D, T))
row('bwd dX down', t(lambda: dq @ Wd), fl(T, F, D))
row('bwd dW down', t(lambda: dq.t() @ h), fl(D, F, T))
print('| GEMM | ms | TFLOP/s |\n|---|---|---|')
for name, ms, tf in rows: print('| %s | %.3f | %.0f |' % (name, ms, tf))
print(subprocess.run(['nvidia-smi', '--query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu', '--format=csv'], capture_output=True, text=True).stdout)
# Sustained load: do the clocks drop (power cap)?
import threading
samples = []
stop = False
def sample():
    while not stop:
        samples.append(subprocess.run(['nvidia-smi', '--query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active', '--format=csv,noheader'], capture_output=True, text=True).stdout.strip())
        time.sleep(0.5)
th = threading.Thread(target=sample); th.start()
times = []
for i in range(40):
    times.append(t(lambda: x @ Wgu.t(), iters=100))
stop = True; th.join()
print('sustained gate+up ms per GEMM over 40 x 100 calls:', ' '.join('%.3f' % v for v in times))
print('\n'.join(samples))
