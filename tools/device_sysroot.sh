#!/usr/bin/env bash
# Prepares .device/ for builds on the GPU machine (PyTorch 2.x from pip, no Bazel, no Debian -dev
# packages): Bazel 2.1 via ../shared/device/fetch-bazel.sh, and a sysroot with Debian's Abseil,
# Protobuf (headers, libraries and protoc: the checkpoint manifest and FX import use it),
# GoogleTest/GoogleMock, Benchmark and Gloo (headers + libraries, and libgloo's own dependencies)
# that MAGI_SYSROOT points the overlays at. Then call the device tool with carry [".device"] and:
#   source .device/start.sh &&
#   $BAZEL test $BAZEL_FLAGS --config=cuda //magi/frontend/capture:capture_cuda_test ...
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
bash ../shared/device/fetch-bazel.sh
sysroot=.device/sysroot
rm -rf "$sysroot"
mkdir -p "$sysroot/include" "$sysroot/lib"
mkdir -p "$sysroot/include/google" "$sysroot/bin"
cp -r /usr/include/google/protobuf "$sysroot/include/google/"
cp -r /usr/include/absl /usr/include/gtest /usr/include/gmock /usr/include/benchmark /usr/include/gloo "$sysroot/include/"
multiarch=/usr/lib/x86_64-linux-gnu
cp -L "$multiarch"/libabsl_*.so "$multiarch"/libabsl_*.so.2* "$sysroot/lib/"
cp -L "$multiarch"/libg{test,mock}*.a "$multiarch"/libbenchmark*.a "$multiarch"/libbenchmark.so "$sysroot/lib/"
cp -L /usr/lib/libgloo.so /usr/lib/libgloo.so.0 "$sysroot/lib/"
cp -L "$multiarch"/libprotobuf.so "$multiarch"/libprotobuf.so.32 "$multiarch"/libprotoc.so.32 "$sysroot/lib/"
# protoc finds its libprotoc/libprotobuf next to it: the image has neither.
cp -L /usr/bin/protoc "$sysroot/bin/protoc.bin"
cat > "$sysroot/bin/protoc" <<'SH'
#!/bin/sh
here=$(dirname "$0")
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/protoc.bin" "$@"
SH
chmod +x "$sysroot/bin/protoc"
# The device tool carries at most 64 MiB: the unversioned names the linker looks up (-lfoo) become
# one-line linker scripts naming the versioned library instead of second copies of it.
for so in "$sysroot"/lib/*.so; do
  versioned=$(ls "$so".* 2>/dev/null | head -1 || true)
  if [[ -n "$versioned" ]]; then printf 'INPUT(%s)\n' "$(basename "$versioned")" > "$so"; fi
done
for lib in libhiredis.so.0.14 libibverbs.so.1 libnl-route-3.so.200 libnl-3.so.200; do
  cp -L "$multiarch/$lib" "$sysroot/lib/"
done
# The device tool carries the working tree and .device together, at most 64 MiB: the sysroot
# travels as an xz tarball (4 MB instead of 17) that .device/start.sh unpacks there.
tar -cJf .device/sysroot.tar.xz -C .device sysroot
rm -rf "$sysroot"
cat > .device/start.sh <<'SH'
# Sourced on the GPU machine: unpacks the sysroot, then sets up the build (on-device.sh).
_magi_device=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
  "$_magi_device/sysroot.tar.xz" "$_magi_device" || return 1
source "$_magi_device/on-device.sh"
export MAGI_SYSROOT=$_magi_device/sysroot
SH
du -sh --apparent-size .device
echo "ready: carry [\".device\"] and start the command with: source .device/start.sh && ..."
