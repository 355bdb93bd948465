# A 2-core x86-64 CPU machine running Debian's LibTorch 1.13 (MKL-DNN/OpenMP kernels),
# with ranks as local processes talking Gloo over loopback TCP. Rates are rough
# defaults; a calibration table measured on the machine (magi::CalibrationTable)
# replaces them per op.
name: cpu
memory_bytes: 25769803776
matmul_flops.f32: 4.0e10
matmul_flops.f64: 2.0e10
matmul_flops.bf16: 1.0e10
matmul_flops.f16: 5.0e9
vector_flops: 4.0e9
memory_bandwidth: 8.0e9
op_overhead_s: 6.0e-6          # dispatcher + interpreter per op (docs/capture.md)
link.intra.latency_s: 5.0e-5   # Gloo over loopback TCP
link.intra.bandwidth: 1.5e9
link.inter.latency_s: 1.0e-4
link.inter.bandwidth: 1.2e9
ranks_per_node: 64
