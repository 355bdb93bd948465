"""GPU energy over a benchmark's timed steps through NVML (ctypes), for the PyTorch columns.

The twin of magi/runtime/nvml/gpu_energy.h, which examples:train uses for Magi's columns: NVML's
total energy counter (millijoules since the driver loaded) read at the start of the first timed
step and the end of the last gives joules per step; the SM clock is sampled after each step and
the enforced power limit read once. Under a power cap a step takes as long as its energy allows
(docs/benchmarks.md, session 12), so joules per step say what seconds alone do not.

    meter = TimedEnergy.open("0000:19:00.0")   # None, with a note on stderr, where NVML is missing
    meter.before_timed_step(); ...; meter.after_timed_step()
    report.update(meter.summary() if meter else NOT_MEASURED)  # gpu_joules_per_step, ... (-1: not measured)
"""
import ctypes
import sys
import time

_NVML_SUCCESS = 0
_NVML_CLOCK_SM = 1


class NvmlError(RuntimeError):
    pass


class TimedEnergy:
    def __init__(self, nvml, device):
        self._nvml, self._device = nvml, device
        self._first = self._last = None
        self._first_time = self._last_time = None
        self._clock_sum, self._steps = 0.0, 0

    @classmethod
    def open(cls, pci_bus_id):
        """The meter of the GPU at `pci_bus_id`, or None (with the reason on stderr)."""
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            print("gpu_energy: GPU energy not measured: cannot load libnvidia-ml.so.1: %s" % e, file=sys.stderr)
            return None
        nvml.nvmlErrorString.restype = ctypes.c_char_p
        try:
            cls._check(nvml, nvml.nvmlInit_v2(), "init")
            device = ctypes.c_void_p()
            cls._check(nvml, nvml.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(device)),
                       "no GPU at PCI bus id %r" % pci_bus_id)
        except NvmlError as e:
            print("gpu_energy: GPU energy not measured: %s" % e, file=sys.stderr)
            return None
        return cls(nvml, device)

    @staticmethod
    def _check(nvml, result, what):
        if result != _NVML_SUCCESS:
            raise NvmlError("NVML %s: %s (%d)" % (what, nvml.nvmlErrorString(result).decode(), result))

    def _joules(self):
        millijoules = ctypes.c_ulonglong()
        self._check(self._nvml, self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._device, ctypes.byref(millijoules)),
                    "total energy")
        return millijoules.value / 1e3

    def before_timed_step(self):
        if self._first is None:
            self._first, self._first_time = self._joules(), time.perf_counter()

    def after_timed_step(self):
        self._last, self._last_time = self._joules(), time.perf_counter()
        clock = ctypes.c_uint()
        self._check(self._nvml, self._nvml.nvmlDeviceGetClockInfo(self._device, _NVML_CLOCK_SM, ctypes.byref(clock)),
                    "SM clock")
        self._clock_sum += clock.value
        self._steps += 1

    def summary(self):
        """The report's GPU members; -1 where nothing was measured (no timed step)."""
        out = dict(NOT_MEASURED)
        if self._steps == 0:
            return out
        joules = self._last - self._first
        seconds = self._last_time - self._first_time
        limit = ctypes.c_uint()
        self._check(self._nvml, self._nvml.nvmlDeviceGetEnforcedPowerLimit(self._device, ctypes.byref(limit)),
                    "enforced power limit")
        out.update(gpu_joules_per_step=joules / self._steps, gpu_average_watts=joules / seconds if seconds > 0 else -1.0,
                   gpu_sm_clock_mhz=self._clock_sum / self._steps, gpu_power_limit_watts=limit.value / 1e3)
        return out


# What a report holds where no meter could be opened.
NOT_MEASURED = {"gpu_joules_per_step": -1.0, "gpu_average_watts": -1.0, "gpu_sm_clock_mhz": -1.0,
                "gpu_power_limit_watts": -1.0}
