"""Tests gpu_energy.WindowEnergy against a fake NVML (no GPU or driver needed)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_energy  # noqa: E402


class FakeNvml:
    """NVML's energy counter and error strings; `fail` makes the next energy read fail."""

    def __init__(self):
        self.millijoules = 1_000_000
        self.fail = False

    def nvmlDeviceGetTotalEnergyConsumption(self, device, out):
        if self.fail:
            return 3  # NVML_ERROR_NOT_SUPPORTED
        out._obj.value = self.millijoules
        return 0

    def nvmlErrorString(self, result):
        return b"Not Supported"


class WindowEnergyTest(unittest.TestCase):
    def test_joules_per_step_and_average_watts_over_the_window(self):
        nvml = FakeNvml()
        meter = gpu_energy.WindowEnergy(nvml, device=None, limit_watts=700.0)
        meter.start()
        nvml.millijoules += 1_330_000  # 1330 J over the window
        meter._start_time -= 2.0  # as if the window took 2 s
        meter.end()
        got = meter.summary(steps=20)
        self.assertAlmostEqual(got["gpu_joules_per_step"], 66.5)
        self.assertAlmostEqual(got["gpu_window_seconds"], 2.0, places=2)
        self.assertAlmostEqual(got["gpu_average_watts"], 665.0, delta=1.0)
        self.assertEqual(got["gpu_power_limit_watts"], 700.0)

    def test_a_failed_read_stops_the_meter_and_reports_not_measured(self):
        nvml = FakeNvml()
        meter = gpu_energy.WindowEnergy(nvml, device=None, limit_watts=700.0)
        meter.start()
        nvml.fail = True
        meter.end()  # says why on stderr, does not raise into the training loop
        self.assertEqual(meter.summary(steps=20), gpu_energy.NOT_MEASURED)
        nvml.fail = False
        meter.start()
        meter.end()
        self.assertEqual(meter.summary(steps=20), gpu_energy.NOT_MEASURED)  # stopped for good

    def test_no_window_or_no_steps_is_not_measured(self):
        meter = gpu_energy.WindowEnergy(FakeNvml(), device=None, limit_watts=700.0)
        self.assertEqual(meter.summary(steps=20), gpu_energy.NOT_MEASURED)
        meter.start()
        meter.end()
        self.assertEqual(meter.summary(steps=0), gpu_energy.NOT_MEASURED)

    def test_open_without_a_driver_returns_none(self):
        try:
            import ctypes
            ctypes.CDLL("libnvidia-ml.so.1")
            self.skipTest("an NVIDIA driver is installed here")
        except OSError:
            pass
        self.assertIsNone(gpu_energy.WindowEnergy.open("0000:00:00.0"))


if __name__ == "__main__":
    unittest.main()
