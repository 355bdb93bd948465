#!/usr/bin/env bash
# Prepares .device/ for builds on the GPU machine (PyTorch 2.x from pip, no Bazel, no Debian -dev
# packages): Bazel 2.1 via ../shared/device/fetch-bazel.sh, and a sysroot with Debian's Abseil,
# GoogleTest/GoogleMock, Benchmark and Gloo (headers + libraries, and libgloo's own dependencies)
# that MAGI_SYSROOT points the overlays at. Then call the device tool with carry [".device"] and:
#   source .device/on-device.sh && export MAGI_SYSROOT=$PWD/.device/sysroot &&
#   $BAZEL test $BAZEL_FLAGS --config=cuda //magi/frontend/capture:capture_cuda_test ...
# (leave out targets that need Protobuf: that image has no protoc).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
bash ../shared/device/fetch-bazel.sh
sysroot=.device/sysroot
rm -rf "$sysroot"
mkdir -p "$sysroot/include" "$sysroot/lib"
cp -r /usr/include/absl /usr/include/gtest /usr/include/gmock /usr/include/benchmark /usr/include/gloo "$sysroot/include/"
multiarch=/usr/lib/x86_64-linux-gnu
cp -L "$multiarch"/libabsl_*.so "$multiarch"/libabsl_*.so.2* "$sysroot/lib/"
cp -L "$multiarch"/libg{test,mock}*.a "$multiarch"/libbenchmark*.a "$multiarch"/libbenchmark.so "$sysroot/lib/"
cp -L /usr/lib/libgloo.so /usr/lib/libgloo.so.0 "$sysroot/lib/"
for lib in libhiredis.so.0.14 libibverbs.so.1 libnl-route-3.so.200 libnl-3.so.200; do
  cp -L "$multiarch/$lib" "$sysroot/lib/"
done
du -sh .device
