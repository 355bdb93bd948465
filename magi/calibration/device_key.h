// The device part of a calibration table's key (KernelCalibrator::DeviceKey): tables are
// reused only on the machine kind, thread count and LibTorch they were measured with.
#ifndef MAGI_CALIBRATION_DEVICE_KEY_H_
#define MAGI_CALIBRATION_DEVICE_KEY_H_

#include <ATen/ATen.h>

#include <string>

namespace magi {

// "cpu <model name>, <N> threads, libtorch <version>" (/proc/cpuinfo, at::get_num_threads)
// or "cuda <device name>, libtorch <version>, device-timed".
std::string TorchDeviceKey(const at::Device& device);

}  // namespace magi

#endif  // MAGI_CALIBRATION_DEVICE_KEY_H_
