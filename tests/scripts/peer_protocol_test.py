#!/usr/bin/env python3
"""The peers' timing protocol (scripts/peers/timing.py) without torch or a GPU.

The scheduler samples the implementations of a configuration in rotated rounds after each one's
warm-up and stops each by flashbench's rule (at least --min-samples, then --max-samples, --max-time
seconds of one implementation's samples, or the noise target); a sample is throttled by its SM clock
or a slowdown reason bit; the summaries count throttled samples and leave them out of the median
only where enough unthrottled ones remain. The clocks are read through a fake NVML library and a
fake nvidia-smi; without either (no library, an NVML that does not start, an unknown GPU, no
nvidia-smi) the clock keys are null and the reason is given. CudaProtocol runs on a fake torch: the
spin is queued before the start event, sized from the clock rate, the maximum SM clock or a
calibration. Provenance names torch, cuDNN, the driver (the clock reader's or the kernel module's)
and the GPU. The parts of torch_sdpa.py and torch_cpu.py that need no torch (the causal mask's
visible pairs, the problem keys, the options, one backend's job) run here, and scripts/gpu-bench.sh
is run with a fake flashbench and a fake python3 to check that the peers get the options it gives
flashbench and that torch_sdpa.py accepts them.

usage: tests/scripts/peer_protocol_test.py FLASHBENCH_BINARY SOURCE_DIR
"""
import argparse
import contextlib
import ctypes
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import types
import unittest
from pathlib import Path
from unittest import mock

BINARY = os.path.abspath(sys.argv[1])
SOURCE_DIR = Path(sys.argv[2]).resolve()
sys.path.insert(0, str(SOURCE_DIR / "scripts" / "peers"))
import timing  # noqa: E402


def rule(warmup=0, min_samples=3, max_samples=6, max_noise=0.0, max_time=1e9):
    return argparse.Namespace(warmup=warmup, min_samples=min_samples, max_samples=max_samples,
                              max_noise=max_noise, max_time=max_time)


def protocol_args(min_samples=3, max_samples=3, occupy_ms=0.5, throttle_threshold=0.95):
    return argparse.Namespace(warmup=0, min_samples=min_samples, max_samples=max_samples, max_noise=0.0,
                              max_time=1e9, occupy_ms=occupy_ms, throttle_threshold=throttle_threshold)


class FakeClock:
    """A perf_counter that advances by `step` seconds a call."""

    def __init__(self, step=0.0):
        self.now, self.step = 0.0, step

    def __call__(self):
        self.now += self.step
        return self.now


def recording_job(name, log, times=None, phases=("fwd", "bwd")):
    """A Job whose phases append (name, phase) to log and return times[phase] (or 1.0); before and
    after append (name, "before") and (name, "after")."""
    times = times or {}

    def phase_fn(phase):
        def run():
            log.append((name, phase))
            return times.get(phase, 1.0)
        return run
    return timing.Job(name, [(p, phase_fn(p)) for p in phases], before=lambda: log.append((name, "before")),
                      after=lambda: log.append((name, "after")))


class Scheduler(unittest.TestCase):
    def test_rotation(self):
        self.assertEqual(timing.rotation(["A", "B", "C"], 0), ["A", "B", "C"])
        self.assertEqual(timing.rotation(["A", "B", "C"], 1), ["B", "C", "A"])
        self.assertEqual(timing.rotation(["A", "B", "C"], 5), ["C", "A", "B"])
        self.assertEqual(timing.rotation([], 3), [])

    def test_rounds_interleave_with_rotated_starts(self):
        log = []
        jobs = [recording_job(n, log, phases=("fwd",)) for n in "ABC"]
        timing.interleave(jobs, rule(warmup=2, min_samples=3, max_samples=3))
        order = [name for name, phase in log if phase == "fwd"]
        # the warm-up: two runs of each, A's first; then rounds ABC, BCA, CAB
        self.assertEqual(order[:6], list("AABBCC"))
        self.assertEqual("".join(order[6:]), "ABC" "BCA" "CAB")
        for job in jobs:
            self.assertEqual(len(job.samples["fwd"]), 3)  # warm-up runs are not samples
            self.assertTrue(job.done)
            self.assertIsNone(job.error)

    def test_phases_in_order_with_before_and_after(self):
        log = []
        job = recording_job("A", log)
        timing.interleave([job], rule(min_samples=1, max_samples=1))
        self.assertEqual(log, [("A", "before"), ("A", "fwd"), ("A", "bwd"), ("A", "after")])

    def test_finished_jobs_drop_out(self):
        # A's samples are all equal (noise 0): done at min_samples; B's alternate (noisy): it goes on.
        log = []
        a = recording_job("A", log, phases=("fwd",))
        values = iter([1.0, 3.0] * 10)
        b = timing.Job("B", [("fwd", lambda: (log.append(("B", "fwd")), next(values))[1])])
        timing.interleave([a, b], rule(min_samples=3, max_samples=6, max_noise=0.02))
        self.assertEqual(len(a.samples["fwd"]), 3)
        self.assertEqual(len(b.samples["fwd"]), 6)
        order = "".join(name for name, phase in log if phase == "fwd")
        self.assertEqual(order, "AB" "BA" "AB" "B" "B" "B")

    def test_time_budget_is_per_implementation(self):
        # The fake clock steps 0.25 s a call and is read before and after each sample: 0.25 s a
        # sample, fwd and bwd together, as flashbench's --max-time counts one configuration's samples.
        for phases in (("fwd",), ("fwd", "bwd")):
            values = iter([1.0, 2.0, 4.0, 8.0] * 20)
            noisy = timing.Job("N", [(p, lambda: next(values)) for p in phases])
            timing.interleave([noisy], rule(min_samples=2, max_samples=100, max_noise=0.0, max_time=1.0),
                              clock=FakeClock(step=0.25))
            self.assertEqual(len(noisy.samples["fwd"]), 4, phases)
            self.assertEqual(noisy.elapsed, 1.0)

    def test_stopping_rule_as_flashbench(self):
        self.assertTrue(timing.rule_holds([[1.0] * 6], 0.0, rule(max_samples=6)))
        self.assertFalse(timing.rule_holds([[1.0] * 2], 10.0, rule(min_samples=3, max_time=1.0)))
        self.assertTrue(timing.rule_holds([[1.0, 2.0, 4.0]], 10.0, rule(min_samples=3, max_time=1.0)))  # time up
        self.assertFalse(timing.rule_holds([[1.0, 2.0, 4.0]], 0.5, rule(min_samples=3, max_time=1.0)))
        # min_samples wins over max_samples, as in flashbench's needs_more_samples
        self.assertFalse(timing.rule_holds([[1.0] * 4], 0.0, rule(min_samples=5, max_samples=3)))
        # noise below the target in one phase but not the other: not done
        self.assertFalse(timing.rule_holds([[1.0] * 4, [1.0, 3.0, 1.0, 3.0]], 0.0,
                                           rule(min_samples=3, max_samples=10, max_noise=0.02)))
        self.assertTrue(timing.rule_holds([[1.0] * 4, [2.0] * 4], 0.0,
                                          rule(min_samples=3, max_samples=10, max_noise=0.02)))

    def test_a_failing_job_stops_alone(self):
        calls = {"n": 0}

        def flaky():
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("CUDA out of memory")
            return 1.0
        held = []
        bad = timing.Job("bad", [("fwd", flaky)], before=lambda: held.append(1), after=held.clear)
        good = recording_job("good", [], phases=("fwd",))
        timing.interleave([bad, good], rule(warmup=1, min_samples=4, max_samples=4))
        self.assertIsInstance(bad.error, RuntimeError)
        self.assertEqual(len(bad.samples["fwd"]), 1)  # the warm-up, one sample, then the raise
        self.assertEqual(held, [])  # after() ran although the phase raised
        self.assertEqual(len(good.samples["fwd"]), 4)
        self.assertIsNone(good.error)

    def test_warmup_failure_is_the_jobs_error(self):
        def broken():
            raise ValueError("no kernel")
        job = timing.Job("x", [("fwd", broken)])
        timing.interleave([job], rule(warmup=1))
        self.assertIsInstance(job.error, ValueError)
        self.assertEqual(job.samples["fwd"], [])

    def test_clock_read_after_every_timed_region(self):
        readings = iter([(1980, 0), (1500, 0), (1980, 0x4), (1980, 0)] * 3)
        job = recording_job("A", [])
        timing.interleave([job], rule(min_samples=2, max_samples=2), read_clock=lambda: next(readings))
        self.assertEqual(job.readings["fwd"], [(1980, 0), (1980, 0x4)])
        self.assertEqual(job.readings["bwd"], [(1500, 0), (1980, 0)])

    def test_warmup_reads_no_clock(self):
        reads = []
        job = recording_job("A", [], phases=("fwd",))
        timing.interleave([job], rule(warmup=3, min_samples=2, max_samples=2),
                          read_clock=lambda: reads.append(1) or (1980, 0))
        self.assertEqual(len(reads), 2)


class Throttle(unittest.TestCase):
    def test_reason_bits(self):
        for bit in (0x4, 0x8, 0x20, 0x40, 0x80):
            self.assertTrue(timing.is_throttled((1980, bit), 1980, 0.95), hex(bit))
        for bit in (0x0, 0x1, 0x2, 0x10, 0x100):
            self.assertFalse(timing.is_throttled((1980, bit), 1980, 0.95), hex(bit))
        self.assertEqual(timing.THROTTLE_MASK, 0xEC)

    def test_clock_threshold(self):
        self.assertFalse(timing.is_throttled((1881, 0), 1980, 0.95))  # 0.95 x 1980 = 1881: not below
        self.assertTrue(timing.is_throttled((1880, 0), 1980, 0.95))
        self.assertTrue(timing.is_throttled((1500, None), 1980, 0.95))  # no reasons, the clock says
        self.assertFalse(timing.is_throttled((1500, 0), 1980, 0.5))

    def test_unknown(self):
        self.assertIsNone(timing.is_throttled(None, 1980, 0.95))
        self.assertIsNone(timing.is_throttled((None, None), 1980, 0.95))
        self.assertIsNone(timing.is_throttled((1500, None), None, 0.95))  # no max clock to hold it to
        self.assertTrue(timing.is_throttled((None, 0x4), None, 0.95))
        self.assertFalse(timing.is_throttled((None, 0x0), None, 0.95))


class Summary(unittest.TestCase):
    SAMPLES = [1.0, 5.0, 2.0, 9.0, 3.0]
    READINGS = [(1980, 0), (1400, 0), (1980, 0x1), (1980, 0x4), (1900, 0)]  # 2nd and 4th throttled
    KEYS = ("median_ms", "mean_ms", "stddev_ms", "min_ms", "max_ms", "samples_ms", "count", "median_noise",
            "excluded_samples", "throttled_samples", "median_unthrottled_ms", "sm_clock_mhz",
            "clock_event_reason_bits")

    def test_throttled_left_out_where_enough_remain(self):
        s = timing.summary(self.SAMPLES, self.READINGS, 1980, 0.95, min_unthrottled=3)
        self.assertEqual(tuple(s), self.KEYS)
        self.assertEqual(s["median_ms"], 2.0)  # of 1, 2, 3: the 5 and the 9 were throttled
        self.assertEqual((s["min_ms"], s["max_ms"], s["mean_ms"]), (1.0, 3.0, 2.0))
        self.assertEqual(s["stddev_ms"], 1.0)
        self.assertEqual(s["excluded_samples"], 2)
        self.assertEqual(s["samples_ms"], self.SAMPLES)  # every sample, in the order taken
        self.assertEqual(s["count"], 5)
        self.assertEqual(s["throttled_samples"], 2)
        self.assertEqual(s["median_unthrottled_ms"], 2.0)
        self.assertEqual(s["sm_clock_mhz"], [1980, 1400, 1980, 1980, 1900])
        self.assertEqual(s["clock_event_reason_bits"], [0, 0, 1, 4, 0])

    def test_all_kept_where_too_few_remain(self):
        s = timing.summary(self.SAMPLES, self.READINGS, 1980, 0.95, min_unthrottled=4)
        self.assertEqual(s["median_ms"], 3.0)  # over all five
        self.assertEqual((s["min_ms"], s["max_ms"]), (1.0, 9.0))
        self.assertEqual(s["excluded_samples"], 0)
        self.assertEqual(s["throttled_samples"], 2)
        self.assertEqual(s["median_unthrottled_ms"], 2.0)  # still told

    def test_none_throttled(self):
        s = timing.summary(self.SAMPLES, [(1980, 0)] * 5, 1980, 0.95, min_unthrottled=3)
        self.assertEqual((s["median_ms"], s["excluded_samples"], s["throttled_samples"]), (3.0, 0, 0))
        self.assertEqual(s["median_unthrottled_ms"], 3.0)

    def test_all_throttled(self):
        s = timing.summary([1.0, 2.0], [(1000, 0), (1980, 0x8)], 1980, 0.95)
        self.assertEqual(s["throttled_samples"], 2)
        self.assertEqual(s["excluded_samples"], 0)
        self.assertEqual(s["median_ms"], 1.5)
        self.assertIsNone(s["median_unthrottled_ms"])

    def test_partial_readings(self):
        # A sample whose clocks did not answer is not known unthrottled: where throttled ones are left
        # out, so is it, and median_ms is then median_unthrottled_ms.
        s = timing.summary([1.0, 2.0, 4.0], [(None, None), (1980, 0), (None, 0x20)], 1980, 0.95)
        self.assertEqual(s["sm_clock_mhz"], [None, 1980, None])
        self.assertEqual(s["clock_event_reason_bits"], [None, 0, 32])
        self.assertEqual(s["throttled_samples"], 1)
        self.assertEqual((s["median_ms"], s["median_unthrottled_ms"], s["excluded_samples"]), (2.0, 2.0, 2))

    def test_without_clocks(self):
        for readings in (None, [None] * 5):
            s = timing.summary(self.SAMPLES, readings)
            for key in ("throttled_samples", "median_unthrottled_ms"):
                self.assertIsNone(s[key], key)
            self.assertEqual((s["median_ms"], s["excluded_samples"]), (3.0, 0))
        self.assertIsNone(timing.summary(self.SAMPLES)["sm_clock_mhz"])

    def test_readings_must_match_samples(self):
        with self.assertRaises(ValueError):
            timing.summary([1.0, 2.0], [(1980, 0)], 1980, 0.95)

    def test_job_summaries_follow_the_clocks(self):
        job = timing.Job("A", [("fwd", lambda: 1.0)])
        timing.interleave([job], rule(min_samples=2, max_samples=2), read_clock=lambda: (1000, 0))
        absent = timing.GpuClocks(why_not="no NVML here")
        self.assertIsNone(job.summaries(absent)["fwd"]["throttled_samples"])
        self.assertIsNone(job.summaries(None)["fwd"]["sm_clock_mhz"])


# ------------------------------------------------------------------------------------------------
# A fake NVML: the C functions as Python callables writing through ctypes pointers and buffers.

class FakeNvml:
    DEVICE = 0x5EED

    def __init__(self, init_status=0, uuid="GPU-1234", old_reasons_name=False, sm=(1980,), reasons=(0,)):
        self.init_status, self.uuid = init_status, uuid
        self.sm, self.reasons = list(sm), list(reasons)
        self.reads = 0
        self.handles_asked = []
        if old_reasons_name:
            self.nvmlDeviceGetCurrentClocksThrottleReasons = self._reasons
        else:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons

    def nvmlInit_v2(self):
        return self.init_status

    def nvmlErrorString(self, status):
        return {999: b"Unknown Error", 13: b"Not Found"}.get(status, b"error")

    def _handle(self, how, key, pointer):
        self.handles_asked.append((how, key))
        if how == "uuid" and key != self.uuid:
            return 13
        if how == "pci" and key != "00000000:65:00.0":
            return 13
        pointer.contents.value = self.DEVICE
        return 0

    def nvmlDeviceGetHandleByUUID(self, uuid, pointer):
        return self._handle("uuid", uuid.value.decode(), pointer)

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus, pointer):
        return self._handle("pci", bus.value.decode(), pointer)

    def nvmlDeviceGetHandleByIndex_v2(self, index, pointer):
        return self._handle("index", index.value, pointer)

    def _is_device(self, device):
        assert device.value == self.DEVICE, device

    def nvmlDeviceGetMaxClockInfo(self, device, clock, pointer):
        self._is_device(device)
        assert clock.value == 1  # NVML_CLOCK_SM
        pointer.contents.value = 1980
        return 0

    def nvmlDeviceGetClockInfo(self, device, clock, pointer):
        self._is_device(device)
        assert clock.value == 1
        pointer.contents.value = self.sm[min(self.reads, len(self.sm) - 1)]
        return 0

    def _reasons(self, device, pointer):
        self._is_device(device)
        pointer.contents.value = self.reasons[min(self.reads, len(self.reasons) - 1)]
        self.reads += 1
        return 0

    def nvmlDeviceGetUUID(self, device, buffer, size):
        self._is_device(device)
        buffer.value = self.uuid.encode()
        return 0

    def nvmlDeviceGetName(self, device, buffer, size):
        buffer.value = b"NVIDIA H100 80GB HBM3"
        return 0

    def nvmlSystemGetDriverVersion(self, buffer, size):
        assert isinstance(size, ctypes.c_uint)
        buffer.value = b"580.159.04"
        return 0


def loader_of(lib):
    def load(name):
        assert name == "libnvidia-ml.so.1", name
        return lib
    return load


def no_library(name):
    raise OSError(f"{name}: cannot open shared object file: No such file or directory")


def no_smi(argv):
    raise timing.NotInstalled(f"{argv[0]} is not installed")


class FakeSmi:
    """nvidia-smi --id=ID --query-gpu=FIELDS --format=csv,noheader,nounits, as run_command runs it:
    (exit status, stdout, stderr). `readings` are (reasons, sm) texts, one a clock query (the first
    answers SmiReader's probe of the field's name); the last repeats."""

    def __init__(self, ids=("GPU-1234",), old_field=True, readings=(("0x0000000000000004", "1500"),), fail_after=None):
        self.ids, self.old_field = set(ids), old_field
        self.readings = list(readings)
        self.fail_after = fail_after
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        assert argv[0] == "nvidia-smi" and argv[3] == "--format=csv,noheader,nounits", argv
        gpu, fields = argv[1].split("=", 1)[1], argv[2].split("=", 1)[1]
        if gpu not in self.ids:
            return 6, "No devices were found\n", ""
        if fields == "name,uuid,driver_version,clocks.max.sm":
            return 0, "NVIDIA H100 80GB HBM3, GPU-1234, 580.159.04, 1980\n", ""
        reasons, sm = fields.split(",")
        assert sm == "clocks.sm", fields
        if reasons == "clocks_throttle_reasons.active" and not self.old_field:
            return 2, 'Field "clocks_throttle_reasons.active" is not a valid field to query.\n', ""
        clock_queries = sum(1 for call in self.calls if "clocks.sm" in call[2].split("=")[1].split(","))
        if self.fail_after is not None and clock_queries > self.fail_after:
            return 15, "", "Unable to determine the device handle: GPU is lost"
        text = self.readings[min(clock_queries - 1, len(self.readings) - 1)]
        return 0, f"{text[0]}, {text[1]}\n", ""


class NvmlReading(unittest.TestCase):
    def test_keys(self):
        self.assertEqual(timing.nvml_keys("1234", "00000000:65:00.0", 0, None),
                         [("uuid", "GPU-1234"), ("pci_bus_id", "00000000:65:00.0"), ("index", 0)])
        self.assertEqual(timing.nvml_keys("GPU-1234", None, 0, "1"), [("uuid", "GPU-1234")])  # NVML ignores it
        self.assertEqual(timing.nvml_keys(None, None, 2, ""), [("index", 2)])

    def test_reads_the_device_found_by_uuid(self):
        lib = FakeNvml(sm=(1980, 1500), reasons=(0, 0x4))
        clocks = timing.open_clocks(timing.nvml_keys("1234", None, 0, None), loader_of(lib), no_smi)
        self.assertTrue(clocks.available)
        self.assertIsNone(clocks.why_not)
        self.assertEqual((clocks.source, clocks.found_by), ("nvml", "uuid"))
        self.assertEqual(clocks.max_sm_mhz, 1980)
        self.assertEqual(clocks.uuid, "GPU-1234")
        self.assertEqual(clocks.driver_version, "580.159.04")
        self.assertEqual(clocks.read(), (1980, 0))
        self.assertEqual(clocks.read(), (1500, 0x4))
        self.assertEqual(clocks.meta(), {"clocks": "nvml", "clocks_found_by": "uuid", "sm_clock_max_mhz": 1980})

    def test_falls_back_to_the_next_key_and_the_old_reasons_name(self):
        lib = FakeNvml(uuid="GPU-other", old_reasons_name=True, reasons=(0x8,))
        clocks = timing.open_clocks(timing.nvml_keys("1234", "00000000:65:00.0", 0, None), loader_of(lib), no_smi)
        self.assertEqual(clocks.found_by, "pci_bus_id")
        self.assertEqual(lib.handles_asked, [("uuid", "GPU-1234"), ("pci", "00000000:65:00.0")])
        self.assertEqual(clocks.read(), (1980, 0x8))

    def test_a_whole_configuration_with_fake_clocks(self):
        # SM clock per timed region: fwd 1980, bwd 1400 (throttled), fwd 1980, bwd 1980 ...
        lib = FakeNvml(sm=(1980, 1400, 1980, 1980, 1980, 1980), reasons=(0,))
        clocks = timing.open_clocks([("index", 0)], loader_of(lib), no_smi)
        times = iter([1.0, 10.0, 1.0, 20.0, 1.0, 30.0])
        job = timing.Job("A", [("fwd", lambda: next(times)), ("bwd", lambda: next(times))])
        timing.interleave([job], rule(min_samples=3, max_samples=3), read_clock=clocks.read_clock)
        bwd = job.summaries(clocks, 0.95, min_unthrottled=2)["bwd"]
        self.assertEqual(bwd["sm_clock_mhz"], [1400, 1980, 1980])
        self.assertEqual(bwd["throttled_samples"], 1)
        self.assertEqual(bwd["samples_ms"], [10.0, 20.0, 30.0])
        self.assertEqual((bwd["median_ms"], bwd["excluded_samples"]), (25.0, 1))
        self.assertEqual(job.summaries(clocks, 0.95, min_unthrottled=3)["bwd"]["median_ms"], 20.0)
        self.assertEqual(job.summaries(clocks, 0.95)["fwd"]["throttled_samples"], 0)


class SmiReading(unittest.TestCase):
    """nvidia-smi where NVML cannot be opened from Python."""

    def test_reads_through_nvidia_smi_without_nvml(self):
        smi = FakeSmi(readings=(("0x0000000000000000", "1980"), ("0x0000000000000000", "1980"),
                                ("0x0000000000000004", "1500")))
        clocks = timing.open_clocks(timing.nvml_keys("1234", None, 0, None), no_library, smi)
        self.assertTrue(clocks.available)
        self.assertEqual((clocks.source, clocks.found_by, clocks.max_sm_mhz), ("nvidia-smi", "uuid", 1980))
        self.assertEqual((clocks.name, clocks.uuid, clocks.driver_version),
                         ("NVIDIA H100 80GB HBM3", "GPU-1234", "580.159.04"))
        self.assertEqual(clocks.reader.reasons_field, "clocks_throttle_reasons.active")
        self.assertEqual(clocks.read(), (1980, 0))
        self.assertEqual(clocks.read(), (1500, 0x4))
        self.assertEqual(smi.calls[-1], ["nvidia-smi", "--id=GPU-1234", "--query-gpu=clocks_throttle_reasons.active,"
                                         "clocks.sm", "--format=csv,noheader,nounits"])
        self.assertEqual(clocks.meta()["clocks"], "nvidia-smi")
        self.assertTrue(timing.is_throttled(clocks.read(), clocks.max_sm_mhz, 0.95))

    def test_newer_field_name(self):
        smi = FakeSmi(old_field=False, readings=(("0x0000000000000020", "1980"),))
        clocks = timing.open_clocks([("index", 0)], no_library, smi)
        self.assertFalse(clocks.available)  # the fake knows the GPU by UUID only
        smi.ids.add("0")
        clocks = timing.open_clocks([("index", 0)], no_library, smi)
        self.assertEqual(clocks.reader.reasons_field, "clocks_event_reasons.active")
        self.assertEqual(clocks.read(), (1980, 0x20))

    def test_not_available_fields_and_a_lost_gpu_read_as_unknown(self):
        smi = FakeSmi(readings=(("0x0000000000000000", "1980"), ("[N/A]", "[N/A]")), fail_after=2)
        clocks = timing.open_clocks([("uuid", "GPU-1234")], no_library, smi)
        self.assertEqual(clocks.read(), (None, None))  # the second clock query: [N/A]
        self.assertEqual(clocks.read(), (None, None))  # the third: nvidia-smi failed
        self.assertIsNone(timing.is_throttled(clocks.read(), None, 0.95))

    def test_unknown_gpu_gives_every_reason(self):
        smi = FakeSmi(ids=())
        clocks = timing.open_clocks([("uuid", "GPU-1234"), ("index", 0)], no_library, smi)
        self.assertFalse(clocks.available)
        self.assertIn("libnvidia-ml.so.1 (NVML, from the NVIDIA driver) is not installed", clocks.why_not)
        self.assertIn("nvidia-smi --id=GPU-1234 --query-gpu=name,uuid,driver_version,clocks.max.sm: No devices were "
                      "found", clocks.why_not)
        self.assertIn("--id=0", clocks.why_not)

    def test_no_nvidia_smi_is_tried_once(self):
        calls = []

        def missing(argv):
            calls.append(argv)
            no_smi(argv)
        clocks = timing.open_clocks([("uuid", "GPU-1234"), ("index", 0)], no_library, missing)
        self.assertEqual(len(calls), 1)
        self.assertTrue(clocks.why_not.endswith("; nvidia-smi is not installed"), clocks.why_not)

    def test_run_command(self):
        self.assertEqual(timing.run_command([sys.executable, "-c", "print('a'); raise SystemExit(3)"]), (3, "a\n", ""))
        with self.assertRaises(timing.NotInstalled):
            timing.run_command(["/nonexistent/nvidia-smi"])


class ClocksAbsent(unittest.TestCase):
    def assert_absent(self, clocks, why):
        self.assertFalse(clocks.available)
        self.assertIn(why, clocks.why_not)
        self.assertIsNone(clocks.read_clock)
        self.assertIsNone(clocks.max_sm_mhz)
        self.assertEqual(clocks.meta()["clocks"], "not read: " + clocks.why_not)
        job = timing.Job("A", [("fwd", lambda: 1.0)])
        timing.interleave([job], rule(min_samples=2, max_samples=2), read_clock=clocks.read_clock)
        s = job.summaries(clocks, 0.95)["fwd"]
        for key in ("throttled_samples", "sm_clock_mhz", "clock_event_reason_bits", "median_unthrottled_ms"):
            self.assertIsNone(s[key], key)
        self.assertEqual(s["median_ms"], 1.0)
        p = timing.provenance(None, clocks)
        self.assertEqual(p["clocks"], "not read: " + clocks.why_not)
        self.assertIsNone(p["driver_version"])

    def test_no_library(self):
        self.assert_absent(timing.open_clocks([("index", 0)], no_library, no_smi),
                           "libnvidia-ml.so.1 (NVML, from the NVIDIA driver) is not installed; nvidia-smi is not "
                           "installed")

    def test_nvml_does_not_start(self):
        self.assert_absent(timing.open_clocks([("index", 0)], loader_of(FakeNvml(init_status=999)), no_smi),
                           "NVML did not start: Unknown Error")

    def test_unknown_gpu(self):
        self.assert_absent(timing.open_clocks([("uuid", "GPU-nope")], loader_of(FakeNvml()), no_smi),
                           "NVML knows no GPU of uuid GPU-nope: Not Found")

    def test_no_key(self):
        self.assert_absent(timing.open_clocks([], loader_of(FakeNvml()), FakeSmi()), "CUDA_VISIBLE_DEVICES")

    def test_real_readers_or_their_absence(self):
        # This machine's own NVML and nvidia-smi: where neither is there, a reason and no exception.
        clocks = timing.open_clocks([("index", 0)])
        if clocks.available:
            self.assertEqual(len(clocks.read()), 2)
        else:
            self.assertIn("libnvidia-ml.so.1", clocks.why_not)
            self.assertIn("nvidia-smi", clocks.why_not)


class Occupy(unittest.TestCase):
    def test_cycles_and_their_source(self):
        self.assertEqual(timing.occupy_cycles(0.5, clock_rate_khz=1980000), (990000, "clock_rate"))
        self.assertEqual(timing.occupy_cycles(0.5, None, max_sm_mhz=1980), (990000, "max_sm_clock"))
        self.assertEqual(timing.occupy_cycles(0.5, 0, None, cycles_per_ms=1.5e6), (750000, "calibrated"))
        self.assertEqual(timing.occupy_cycles(0, 1980000), (0, "off"))
        with self.assertRaises(ValueError):
            timing.occupy_cycles(0.5)

    def test_options(self):
        p = argparse.ArgumentParser()
        timing.add_arguments(p, warmup=3, max_samples=100, max_time=2.0)
        args = p.parse_args([])
        self.assertEqual((args.occupy_ms, args.throttle_threshold, args.warmup, args.max_samples, args.min_samples),
                         (0.5, 0.95, 3, 100, 5))
        args = p.parse_args(["--occupy-ms", "1.5", "--throttle-threshold", "0.9"])
        self.assertEqual((args.occupy_ms, args.throttle_threshold), (1.5, 0.9))


# ------------------------------------------------------------------------------------------------
# A fake torch: what CudaProtocol and provenance() ask of it, every GPU call logged.

class FakeTorch:
    __version__ = "2.9.0+cu128"

    def __init__(self, clock_rate=None, uuid="1234", event_ms=0.75):
        self.log = []
        self.version = types.SimpleNamespace(cuda="12.8")
        self.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 91002))
        props = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", uuid=uuid, pci_domain_id=0, pci_bus_id=0x65,
                                      pci_device_id=0)
        if clock_rate is not None:
            props.clock_rate = clock_rate
        log, events = self.log, []

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.label = ("start", "end")[len(events) % 2]
                events.append(self)

            def record(self):
                log.append(("record", self.label))

            def synchronize(self):
                log.append(("wait", self.label))

            def elapsed_time(self, end):
                return event_ms

        self.cuda = types.SimpleNamespace(
            Event=Event, current_device=lambda: 0, get_device_properties=lambda index: props,
            is_available=lambda: True, synchronize=lambda: log.append("synchronize"),
            _sleep=lambda cycles: log.append(("sleep", cycles)))


class CudaProtocolOnAFakeTorch(unittest.TestCase):
    def protocol(self, torch, args=None, lib=None):
        return timing.CudaProtocol(torch, args or protocol_args(), loader_of(lib) if lib else no_library, no_smi)

    def test_spin_before_the_start_event(self):
        torch = FakeTorch(clock_rate=1980000)
        protocol = self.protocol(torch)
        torch.log.clear()
        ms = protocol.timed(lambda: torch.log.append("work"))
        self.assertEqual(ms, 0.75)
        self.assertEqual(torch.log, [("sleep", 990000), ("record", "start"), "work", ("record", "end"),
                                     ("wait", "end")])
        self.assertEqual((protocol.cycles, protocol.cycles_from), (990000, "clock_rate"))

    def test_spin_sized_from_the_max_sm_clock_or_measured(self):
        protocol = self.protocol(FakeTorch(), lib=FakeNvml())
        self.assertEqual((protocol.cycles, protocol.cycles_from), (990000, "max_sm_clock"))
        torch = FakeTorch(event_ms=1.0)  # no clock rate, no clocks: 2^21 cycles measured as 1 ms
        protocol = self.protocol(torch)
        self.assertEqual((protocol.cycles, protocol.cycles_from), (1 << 20, "calibrated"))
        self.assertIn(("sleep", 1 << 21), torch.log)

    def test_no_spin(self):
        torch = FakeTorch(clock_rate=1980000)
        protocol = self.protocol(torch, protocol_args(occupy_ms=0))
        torch.log.clear()
        protocol.timed(lambda: None)
        self.assertEqual(torch.log[0], ("record", "start"))
        self.assertEqual(protocol.meta()["occupy_cycles_from"], "off")

    def test_run_reads_clocks_and_excludes_by_min_samples(self):
        # Clocks after fwd, bwd of three samples: the second fwd throttled (sw_power_cap).
        lib = FakeNvml(reasons=(0, 0, 0x4, 0, 0, 0))
        torch = FakeTorch(clock_rate=1980000)
        for min_samples, median, excluded in ((2, 2.0, 1), (3, 3.0, 0)):
            lib.reads = 0
            protocol = self.protocol(torch, protocol_args(min_samples=min_samples), lib)
            times = iter([1.0, 2.0, 9.0, 2.0, 3.0, 2.0])
            job = timing.Job("A", [("fwd", lambda: next(times)), ("bwd", lambda: next(times))])
            protocol.run([job], protocol_args(min_samples=min_samples))
            fwd = protocol.summaries(job)["fwd"]
            self.assertEqual(fwd["throttled_samples"], 1)
            self.assertEqual((fwd["median_ms"], fwd["excluded_samples"]), (median, excluded), min_samples)
        meta = protocol.meta()
        self.assertEqual((meta["protocol"], meta["occupy_ms"], meta["clocks"], meta["min_unthrottled_samples"]),
                         ("interleaved", 0.5, "nvml", 3))

    def test_provenance(self):
        torch = FakeTorch(clock_rate=1980000)
        with tempfile.TemporaryDirectory() as tmp:
            version = Path(tmp) / "version"
            version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
                               "(dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 2025\nGCC version:  gcc version 12\n")
            p = timing.provenance(torch, timing.GpuClocks(why_not="none here"), driver_file=version)
            self.assertEqual(p, {"torch": "2.9.0+cu128", "cudnn": 91002, "cuda_runtime": "12.8",
                                 "driver_version": "570.86.15", "gpu_name": "NVIDIA H100 80GB HBM3",
                                 "gpu_uuid": "GPU-1234", "clocks": "not read: none here"})
            version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 2024\n")
            self.assertEqual(timing.driver_version_from(version), "550.54.15")
            clocks = timing.open_clocks([("index", 0)], loader_of(FakeNvml()), no_smi)
            self.assertEqual(timing.provenance(torch, clocks, driver_file=version)["driver_version"], "580.159.04")
        self.assertIsNone(timing.driver_version_from(Path(tmp) / "gone"))


class FakeTorchCpu:
    """torch as a CPU-only build shows itself to provenance()."""
    __version__ = "2.11.0+cpu"

    class version:
        cuda = None


class Provenance(unittest.TestCase):
    def test_cpu_torch(self):
        p = timing.provenance(FakeTorchCpu)
        self.assertEqual(p, {"torch": "2.11.0+cpu", "cudnn": None, "cuda_runtime": None, "driver_version": None,
                             "gpu_name": None, "gpu_uuid": None, "clocks": None})

    def test_nvml_fills_driver_and_uuid(self):
        clocks = timing.open_clocks([("index", 0)], loader_of(FakeNvml()), no_smi)
        p = timing.provenance(FakeTorchCpu, clocks)
        self.assertEqual((p["driver_version"], p["gpu_uuid"], p["gpu_name"], p["clocks"]),
                         ("580.159.04", "GPU-1234", "NVIDIA H100 80GB HBM3", "nvml"))


# ------------------------------------------------------------------------------------------------
# The peer scripts

class PeerScripts(unittest.TestCase):
    """What of torch_sdpa.py and torch_cpu.py needs no torch."""

    def test_visible_pairs(self):
        import torch_cpu
        import torch_sdpa
        for module in (torch_sdpa, torch_cpu):
            self.assertEqual(module.visible_pairs(4, 4, False), 16)
            self.assertEqual(module.visible_pairs(4, 4, True), 10)  # N(N+1)/2
            self.assertEqual(module.visible_pairs(2, 4, True), 3 + 4)  # bottom-right: row 0 sees 3 keys
            self.assertEqual(module.visible_pairs(4, 2, True), 0 + 0 + 1 + 2)  # two rows see none
        self.assertEqual(torch_sdpa.flop(2, 3, 4, 4, 8, True), 4 * 2 * 3 * 8 * 10)

    def test_problem_keys(self):
        import torch_sdpa
        p = torch_sdpa.problem_of(2, 8, 2, 1024, 2048, 128, True, False, "bf16")
        self.assertEqual(p, {"batch": 2, "heads": 8, "kv_heads": 2, "seq": 1024, "seq_q": 1024, "seq_k": 2048,
                             "head_dim": 128, "layers": 1, "causal": True, "dropout": 0.0, "expand_kv": False,
                             "dtype": "bf16"})
        self.assertTrue(torch_sdpa.problem_of(1, 8, 2, 64, 64, 64, False, True, "fp16")["expand_kv"])
        self.assertFalse(torch_sdpa.problem_of(1, 8, 8, 64, 64, 64, False, True, "fp16")["expand_kv"])  # G = H

    def test_sdpa_options(self):
        import torch_sdpa
        args = torch_sdpa.parser().parse_args(["--out", "x.json", "--backends", "flash,cudnn", "--kv-heads", "4"])
        self.assertEqual(args.backends, ["flash", "cudnn"])
        self.assertEqual((args.occupy_ms, args.throttle_threshold, args.input_scale, args.kv_heads), (0.5, 0.95, 1.0, 4))
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
            torch_sdpa.parser().parse_args(["--out", "x.json", "--backends", "flash,fa3"])

    def test_throttled_text(self):
        import torch_sdpa
        self.assertEqual(torch_sdpa.throttled({"throttled_samples": 2, "count": 40}), "2/40")
        self.assertEqual(torch_sdpa.throttled({"throttled_samples": None, "count": 40}), "?/40")

    def test_a_backends_job(self):
        # One sample of torch_sdpa's job: gradients reset, the forward under its backend, the backward
        # of that forward's output, each in a timed region of its own, then the output dropped.
        import torch_sdpa
        log = []

        class Output:
            def __init__(self, number):
                self.number = number

            def backward(self, gradient):
                log.append(("backward", self.number, gradient))

        @contextlib.contextmanager
        def sdpa_kernel(backend):
            log.append(("enter", backend))
            yield
            log.append(("exit", backend))

        outputs = iter(range(1, 10))

        def attention(q, k, v, causal, expand_kv):
            log.append(("attention", causal, expand_kv))
            return Output(next(outputs))

        class Protocol:
            def timed(self, fn):
                log.append("timed")
                fn()
                return 1.0

        q, k, v = (types.SimpleNamespace(grad="stale") for _ in range(3))
        backends = types.SimpleNamespace(MATH="M", FLASH_ATTENTION="F", EFFICIENT_ATTENTION="E", CUDNN_ATTENTION="C")
        with mock.patch.object(torch_sdpa, "SDPBackend", backends, create=True), \
                mock.patch.object(torch_sdpa, "sdpa_kernel", sdpa_kernel, create=True), \
                mock.patch.object(torch_sdpa, "attention", attention):
            job = torch_sdpa.job_of("flash", (q, k, v, "dO"), True, False, Protocol())
            timing.interleave([job], rule(warmup=1, min_samples=1, max_samples=1))
        self.assertEqual([t.grad for t in (q, k, v)], [None] * 3)
        one = [("enter", "F"), "timed", ("attention", True, False), ("exit", "F"), "timed"]
        self.assertEqual(log, one + [("backward", 1, "dO")] + one + [("backward", 2, "dO")])
        self.assertEqual(len(job.samples["fwd"]), 1)
        self.assertEqual(job.name, "flash")


class GpuBenchPeerFlags(unittest.TestCase):
    """scripts/gpu-bench.sh with a fake flashbench and a fake python3 that log their arguments: the
    peers get the sampling options flashbench's runs get, on the same shapes, and torch_sdpa.py's own
    parser takes them."""

    FAKE = "#!{python}\nimport json, os, sys\nwith open(os.environ['FAKE_LOG'], 'a') as log:\n" \
           "    log.write(json.dumps(['{tool}'] + sys.argv[1:]) + '\\n')\n" \
           "sys.exit(0 if '{tool}' == 'flashbench' or sys.argv[1:2] and sys.argv[1].endswith('torch_sdpa.py') else 1)\n"

    def sweep(self, **env):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "build").mkdir()
            (tmp / "bin").mkdir()
            for tool, folder in (("flashbench", "build"), ("python3", "bin")):
                path = tmp / folder / tool
                path.write_text(self.FAKE.format(python=sys.executable, tool=tool))
                path.chmod(0o755)
            log = tmp / "log"
            environment = dict(os.environ, FAKE_LOG=str(log), BUILD_DIR=str(tmp / "build"), SKIP_CHECK="1",
                               PATH=f"{tmp / 'bin'}:{os.environ['PATH']}", SEQS="128 256", TOKENS="512", HEADS="2",
                               HEAD_DIMS="64", MAX_TIME="0.5", **env)
            done = subprocess.run(["bash", str(SOURCE_DIR / "scripts" / "gpu-bench.sh"), str(tmp / "out")],
                                  env=environment, capture_output=True, text=True, timeout=120)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            calls = [json.loads(line) for line in log.read_text().splitlines()]
        runs = [dict(zip(c[2::2], c[3::2])) for c in calls if c[:2] == ["flashbench", "run"]]
        peers = [c[2:] for c in calls if c[0] == "python3" and c[1:2] and c[1].endswith("torch_sdpa.py")]
        return runs, peers

    def flashbench_default(self, option):
        text = subprocess.run([BINARY, "run", "--help"], capture_output=True, text=True).stdout
        found = re.search(rf"{option} \S+ .*\(default ([0-9.]+)\)", text)
        self.assertIsNotNone(found, f"flashbench run --help names no default for {option}")
        return float(found.group(1))

    def test_peers_sample_as_flashbench(self):
        import torch_sdpa
        runs, peers = self.sweep(MASKS="true false", EXTRA_HEAD_DIMS="96", EXTRA_SEQS="128")
        self.assertEqual(len(peers), 2)  # d = 64 and d = 96
        for argv in peers:
            args = torch_sdpa.parser().parse_args(argv)
            mine = [r for r in runs if int(r["--head-dim"]) == args.head_dim]
            self.assertTrue(mine, args.head_dim)
            for run in mine:
                self.assertEqual((args.warmup, args.min_samples, args.max_time),
                                 (int(run["--warmup"]), int(run["--min-samples"]), float(run["--max-time"])))
                self.assertEqual((args.dtype, args.heads), (run["--dtype"], int(run["--heads"])))
                self.assertEqual(max(1, args.tokens // int(run["--seq"])), int(run["--batch"]))
            self.assertEqual(sorted(args.seq), sorted({int(r["--seq"]) for r in mine}))
            self.assertEqual(args.mask, "both")
            self.assertEqual({r["--mask"] for r in mine}, {"true", "false"})
            self.assertEqual(args.max_noise, self.flashbench_default("--max-noise"))  # neither is given it
        self.assertEqual(sorted(torch_sdpa.parser().parse_args(peers[1]).seq), [128])

    def test_one_mask(self):
        import torch_sdpa
        runs, peers = self.sweep(MASKS="true")
        self.assertEqual([torch_sdpa.parser().parse_args(argv).mask for argv in peers], ["true"])
        self.assertEqual({r["--mask"] for r in runs}, {"true"})


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
