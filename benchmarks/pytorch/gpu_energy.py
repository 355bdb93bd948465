"""GPU energy over a benchmark's timed steps through NVML (ctypes), for the PyTorch columns.

The twin of examples:train's TimedEnergy (magi/runtime/nvml/gpu_energy.h): NVML's total energy
counter (millijoules since the driver loaded) is read before the first timed step and once the
timed steps are over, never between steps (each read leaves the GPU idle, and idle time lets a
power-capped GPU run the next steps faster), so the window includes the loop's work between
steps; its length is reported with it. NVML updates the counter every few tens of ms: over a
window of a few seconds that is a few percent.

    meter = WindowEnergy.open("0000:19:00.0")   # None, with the reason on stderr, where NVML is missing
    meter.start(); <timed steps>; meter.end()
    report.update(meter.summary() if meter else NOT_MEASURED)
"""
import ctypes
import sys
import time

_NVML_SUCCESS = 0

# What a report holds where nothing was measured.
NOT_MEASURED = {"gpu_joules_per_step": -1.0, "gpu_window_seconds": -1.0, "gpu_average_watts": -1.0,
                "gpu_power_limit_watts": -1.0}


class NvmlError(RuntimeError):
    pass


def _note(message):
    print("gpu_energy: GPU energy not measured: %s" % message, file=sys.stderr)


class WindowEnergy:
    def __init__(self, nvml, device, limit_watts):
        self._nvml, self._device, self._limit_watts = nvml, device, limit_watts
        self._start = self._end = None
        self._start_time = self._end_time = None

    @classmethod
    def open(cls, pci_bus_id):
        """The meter of the GPU at `pci_bus_id`, or None (with the reason on stderr)."""
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            nvml.nvmlErrorString.restype = ctypes.c_char_p
            cls._check(nvml, nvml.nvmlInit_v2(), "init")
            device = ctypes.c_void_p()
            cls._check(nvml, nvml.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(device)),
                       "no GPU at PCI bus id %r" % pci_bus_id)
            milliwatts = ctypes.c_uint()
            cls._check(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit(device, ctypes.byref(milliwatts)),
                       "enforced power limit")
        except (OSError, AttributeError, NvmlError) as e:  # no library, an old driver, an NVML error
            _note(e)
            return None
        meter = cls(nvml, device, milliwatts.value / 1e3)
        return meter if meter._read() is not None else None

    @staticmethod
    def _check(nvml, result, what):
        if result != _NVML_SUCCESS:
            raise NvmlError("NVML %s: %s (%d)" % (what, nvml.nvmlErrorString(result).decode(), result))

    def _read(self):
        """Joules since the driver loaded, or None (said once on stderr; the meter then stops)."""
        if self._nvml is None:
            return None
        millijoules = ctypes.c_ulonglong()
        try:
            self._check(self._nvml, self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._device,
                                                                                  ctypes.byref(millijoules)),
                        "total energy")
        except NvmlError as e:
            _note(e)
            self._nvml = None
            return None
        return millijoules.value / 1e3

    def start(self):
        self._start, self._start_time = self._read(), time.perf_counter()

    def end(self):
        self._end, self._end_time = self._read(), time.perf_counter()

    def summary(self, steps):
        """The report's GPU members for `steps` timed steps in the window; -1 where not measured."""
        if self._start is None or self._end is None or steps <= 0 or self._end < self._start:
            return dict(NOT_MEASURED)
        joules, seconds = self._end - self._start, self._end_time - self._start_time
        return {"gpu_joules_per_step": joules / steps, "gpu_window_seconds": seconds,
                "gpu_average_watts": joules / seconds if seconds > 0 else -1.0,
                "gpu_power_limit_watts": self._limit_watts}
