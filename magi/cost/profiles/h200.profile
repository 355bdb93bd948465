# NVIDIA H200 (SXM, 141 GB HBM3e), one GPU of an 8-GPU NVLink node.
# Dense matmul rates are what cuBLAS reaches on large GEMMs (bf16 measured on the
# device machine: ~800 TFLOP/s); HBM copy bandwidth measured: ~4.3 TB/s.
name: h200
memory_bytes: 150323855360
matmul_flops.bf16: 8.0e14
matmul_flops.f16: 8.0e14
matmul_flops.f32: 4.5e14       # TF32 tensor cores (PyTorch allows TF32 for cuDNN, not matmul by default)
matmul_flops.f64: 6.0e13
vector_flops: 6.0e13
memory_bandwidth: 4.3e12
op_overhead_s: 4.0e-6          # kernel launch + dispatcher
# NVLink 4 (NVSwitch): 450 GB/s per direction per GPU; NCCL reaches ~360 GB/s bus bandwidth.
link.intra.latency_s: 8.0e-6
link.intra.bandwidth: 3.6e11
# InfiniBand NDR 400 Gb/s per GPU.
link.inter.latency_s: 1.5e-5
link.inter.bandwidth: 4.5e10
ranks_per_node: 8
