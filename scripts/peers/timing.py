"""The peers' timing protocol: how every torch peer times its work, so that its rows sit beside
flashbench's like for like.

flashbench's runner keeps the device busy before each timed region and stops sampling by one rule. A
peer that timed otherwise (its start event on an idle GPU, the host's dispatch inside the region, one
backend after another while the GPU heats up, power-capped samples unmarked) would measure something
else than flashbench does, and the ratio between the two rows would say little. So every peer:

1. keeps the GPU busy before every timed region: --occupy-ms milliseconds (0.5, as flashbench's
   runner) of torch.cuda._sleep, its cycles from the SM clock (occupy_cycles), queued before the
   start event, so that the host's dispatch of the timed work hides under it as it does under
   flashbench's spin kernel; CUDA events around the region (CudaProtocol.timed);
2. samples the implementations of one configuration interleaved: in rounds, one sample of each a
   round, each round starting one later (A B C, B C A, C A B, ...), after each one's warm-up, so that
   a drift of the GPU's state spreads over all of them instead of landing on whichever ran last; each
   stops by flashbench's rule (rule_holds; interleave);
3. reads the GPU's SM clock and clock-event reason bits after every timed region: through NVML,
   the driver's own library, by ctypes (no pynvml needed), else through nvidia-smi, else not at all
   (open_clocks). A sample is throttled when a power / thermal / hardware slowdown bit is set or its
   SM clock is below --throttle-threshold x the maximum (is_throttled);
4. summarises each timed phase in flashbench's JSON contract (summary): samples_ms keeps every
   sample in the order taken; median_ms and the other statistics leave the throttled samples out
   where at least --min-samples unthrottled ones remain (excluded_samples says how many were left
   out); per sample sm_clock_mhz and clock_event_reason_bits, and throttled_samples and
   median_unthrottled_ms;
5. states what ran it in every output (provenance): torch, cuDNN, the CUDA runtime, the driver, the
   GPU's name and UUID.

Everything but CudaProtocol, calibrate_cycles_per_ms and torch_device_keys runs without torch or a
GPU: tests/scripts/peer_protocol_test.py drives it with fakes of the timed work, the clock, NVML and
nvidia-smi. The peer scripts beside this file import it (they put their own folder on sys.path).
"""
import ctypes
import math
import os
import re
import statistics
import subprocess
import time

# NVML's clocks event reason bits that mean the clock is held down by power, heat or the hardware
# (nvmlClocksEventReason*): what makes a sample throttled. gpu_idle (0x1), applications_clocks_setting
# (0x2), sync_boost (0x10) and display_clock_setting (0x100) do not.
THROTTLE_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}
THROTTLE_MASK = sum(THROTTLE_REASONS)  # 0xec
NVML_LIBRARY = "libnvidia-ml.so.1"
NVML_NOT_INSTALLED = f"{NVML_LIBRARY} (NVML, from the NVIDIA driver) is not installed"
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"


# ---------------------------------------------------------------------------------------------------
# Statistics and the stopping rule

def median_noise(samples):
    """Relative half-width of the distribution-free ~95% CI of the median (as flashbench computes it)."""
    n = len(samples)
    if n < 3:
        return 1.0
    s = sorted(samples)
    median = statistics.median(s)
    half = 1.96 * math.sqrt(n) / 2
    lower = s[max(0, min(n - 1, math.floor(n / 2 - half)))]
    upper = s[max(0, min(n - 1, math.ceil(n / 2 + half)))]
    return 0.5 * (upper - lower) / median if median > 0 else 1.0


def is_throttled(reading, max_sm_mhz, threshold):
    """Whether one sample ran throttled: True, False, or None when the clocks told nothing about it.

    reading is (sm_clock_mhz, clock_event_reasons), either of them None where the reader did not
    answer, or None without clocks. Throttled: a power / thermal / hardware slowdown bit
    (THROTTLE_MASK) is set, or the SM clock is below threshold x max_sm_mhz."""
    if reading is None:
        return None
    sm, reasons = reading
    if reasons is not None and reasons & THROTTLE_MASK:
        return True
    if sm is not None and max_sm_mhz:
        return sm < threshold * max_sm_mhz
    if reasons is not None:
        return False
    return None


def summary(samples, readings=None, max_sm_mhz=None, threshold=0.95, min_unthrottled=1):
    """One phase's samples [ms] as flashbench's timing.fwd / timing.bwd (docs/json.md), with the
    protocol's clock keys after them.

    readings: one (sm_clock_mhz, clock_event_reasons) a sample, or None without clocks (the clock
    keys are then null). samples_ms and count are every sample. The statistics (median_ms, mean_ms,
    stddev_ms, min_ms, max_ms, median_noise) are over the samples known unthrottled where some sample
    was throttled and at least min_unthrottled known unthrottled ones remain, else over every sample;
    excluded_samples is how many they leave out."""
    flags = [None] * len(samples)
    if readings is not None:
        if len(readings) != len(samples):
            raise ValueError(f"{len(readings)} clock readings for {len(samples)} samples")
        flags = [is_throttled(r, max_sm_mhz, threshold) for r in readings]
    unthrottled = [s for s, f in zip(samples, flags) if f is False]
    throttled = sum(1 for f in flags if f)
    kept = unthrottled if throttled and len(unthrottled) >= max(1, min_unthrottled) else list(samples)
    n = len(kept)
    mean = sum(kept) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in kept) / (n - 1)) if n > 1 else 0.0
    known = readings is not None and any(f is not None for f in flags)
    return {"median_ms": statistics.median(kept), "mean_ms": mean, "stddev_ms": std,
            "min_ms": min(kept), "max_ms": max(kept), "samples_ms": list(samples), "count": len(samples),
            "median_noise": median_noise(kept),
            "excluded_samples": len(samples) - n,
            "throttled_samples": throttled if known else None,
            "median_unthrottled_ms": statistics.median(unthrottled) if unthrottled else None,
            "sm_clock_mhz": None if readings is None else
            [None if r is None or r[0] is None else int(r[0]) for r in readings],
            "clock_event_reason_bits": None if readings is None else
            [None if r is None or r[1] is None else int(r[1]) for r in readings]}


def rule_holds(series, elapsed, args):
    """flashbench's stopping rule (needs_more_samples) over one implementation's phases (lists of
    samples [ms]): at least args.min_samples; then at most args.max_samples, at most args.max_time
    seconds of its samples, or until every phase's median noise is at most args.max_noise."""
    n = min(len(s) for s in series)
    if n < args.min_samples:
        return False
    if n >= args.max_samples or elapsed >= args.max_time:
        return True
    return all(median_noise(s) <= args.max_noise for s in series)


# ---------------------------------------------------------------------------------------------------
# Interleaving

class Job:
    """One implementation of a configuration: its timed phases, run in this order in every sample.

    phases: [(name, time_once)], time_once() runs one timed region and returns its milliseconds.
    before() and after() run untimed around each sample (and each warm-up run): resetting gradients,
    dropping the forward's output."""

    def __init__(self, name, phases, before=None, after=None):
        self.name = name
        self.phases = list(phases)
        self.before, self.after = before, after
        self.samples = {phase: [] for phase, _ in self.phases}
        self.readings = {phase: [] for phase, _ in self.phases}
        self.elapsed = 0.0  # seconds spent in this job's samples (before/after and clock reads included)
        self.done = False
        self.error = None  # the exception that stopped it, if one did

    def run(self, record, read_clock):
        """One sample (record) or warm-up run. after() runs even when a phase raised, so a failed
        sample leaves nothing held (the forward's output) for the jobs that go on."""
        try:
            if self.before:
                self.before()
            for phase, time_once in self.phases:
                ms = time_once()
                reading = read_clock() if read_clock else None
                if record:
                    self.samples[phase].append(ms)
                    self.readings[phase].append(reading)
        finally:
            if self.after:
                self.after()

    def summaries(self, clocks=None, threshold=0.95, min_unthrottled=1):
        """{phase: summary} of its samples; the clock keys null where clocks is None or unavailable."""
        available = clocks is not None and clocks.available
        max_mhz = clocks.max_sm_mhz if available else None
        return {phase: summary(s, self.readings[phase] if available else None, max_mhz, threshold, min_unthrottled)
                for phase, s in self.samples.items()}


def rotation(items, round_index):
    """The order of one round: the items, starting with the one at round_index (mod their count)."""
    if not items:
        return []
    start = round_index % len(items)
    return list(items[start:]) + list(items[:start])


def interleave(jobs, args, read_clock=None, clock=time.perf_counter):
    """Samples the jobs in rounds, one sample of each unfinished job a round (rotation's order), after
    args.warmup untimed runs of each, until the stopping rule (rule_holds) holds for every one.
    read_clock() (or None) is called after every timed region and its reading kept with the sample.
    A job whose run raises is stopped with job.error set; the others go on. Returns the jobs."""
    for job in jobs:
        try:
            for _ in range(args.warmup):
                job.run(False, None)
        except Exception as error:  # noqa: BLE001 (an OOM, a kernel that refuses: the caller names it)
            job.error = error
    round_index = 0
    while any(not job.done and job.error is None for job in jobs):
        for job in rotation(jobs, round_index):
            if job.done or job.error is not None:
                continue
            started = clock()
            try:
                job.run(True, read_clock)
            except Exception as error:  # noqa: BLE001
                job.error = error
                continue
            job.elapsed += clock() - started
            job.done = rule_holds(list(job.samples.values()), job.elapsed, args)
        round_index += 1
    return jobs


# ---------------------------------------------------------------------------------------------------
# The GPU's clocks: NVML through ctypes, else nvidia-smi

NVML_SUCCESS = 0
NVML_CLOCK_SM = 1


class ClocksError(Exception):
    """Why a clock reader could not be opened on the GPU."""


class NotInstalled(ClocksError):
    """The reader's program is not there at all: no other GPU key needs trying."""


class Nvml:
    """The part of NVML's C interface the peers read, declared from its documentation. Every call
    returns 0 on success. `lib` is ctypes.CDLL(NVML_LIBRARY) or a fake with the same functions; values
    come back through ctypes pointers and string buffers."""

    def __init__(self, lib):
        self.lib = lib
        error_string = getattr(lib, "nvmlErrorString", None)
        if error_string is not None and hasattr(error_string, "restype"):
            error_string.restype = ctypes.c_char_p
        init = getattr(lib, "nvmlInit_v2", None)
        if init is None:
            raise ClocksError(f"{NVML_LIBRARY} lacks nvmlInit_v2")
        status = init()
        if status != NVML_SUCCESS:
            raise ClocksError(f"NVML did not start: {self.error(status)}")
        # Renamed in CUDA 12.2's NVML ("clocks event"); older drivers have only the throttle name.
        self._reasons = (getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
                         or getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None))

    def error(self, status):
        error_string = getattr(self.lib, "nvmlErrorString", None)
        if error_string is None:
            return f"error {status}"
        text = error_string(status)
        return text.decode(errors="replace") if isinstance(text, bytes) else str(text)

    def _value(self, name, ctype, *args):
        fn = getattr(self.lib, name, None)
        if fn is None:
            return None
        value = ctype()
        if fn(*args, ctypes.pointer(value)) != NVML_SUCCESS:
            return None
        return value.value

    def _text(self, name, *args, size=96):
        fn = getattr(self.lib, name, None)
        if fn is None:
            return None
        buffer = ctypes.create_string_buffer(size)
        if fn(*args, buffer, ctypes.c_uint(size)) != NVML_SUCCESS:
            return None
        return buffer.value.decode(errors="replace")

    def handle(self, how, key):
        """The device NVML knows by how ("uuid", "pci_bus_id" or "index") = key; ClocksError if none."""
        name, arg = {"uuid": ("nvmlDeviceGetHandleByUUID", lambda: ctypes.c_char_p(str(key).encode())),
                     "pci_bus_id": ("nvmlDeviceGetHandleByPciBusId_v2", lambda: ctypes.c_char_p(str(key).encode())),
                     "index": ("nvmlDeviceGetHandleByIndex_v2", lambda: ctypes.c_uint(int(key)))}[how]
        fn = getattr(self.lib, name, None)
        if fn is None:
            raise ClocksError(f"{NVML_LIBRARY} lacks {name}")
        device = ctypes.c_void_p()
        status = fn(arg(), ctypes.pointer(device))
        if status != NVML_SUCCESS:
            raise ClocksError(f"NVML knows no GPU of {how.replace('_', ' ')} {key}: {self.error(status)}")
        return device

    def driver_version(self):
        return self._text("nvmlSystemGetDriverVersion")

    def uuid(self, device):
        return self._text("nvmlDeviceGetUUID", device)

    def name(self, device):
        return self._text("nvmlDeviceGetName", device)

    def max_sm_clock(self, device):
        return self._value("nvmlDeviceGetMaxClockInfo", ctypes.c_uint, device, ctypes.c_int(NVML_CLOCK_SM))

    def sm_clock(self, device):
        return self._value("nvmlDeviceGetClockInfo", ctypes.c_uint, device, ctypes.c_int(NVML_CLOCK_SM))

    def clock_event_reasons(self, device):
        if self._reasons is None:
            return None
        value = ctypes.c_ulonglong()
        if self._reasons(device, ctypes.pointer(value)) != NVML_SUCCESS:
            return None
        return value.value


class NvmlReader:
    """One GPU's clocks through NVML: a few microseconds a reading."""
    source = "nvml"

    def __init__(self, nvml, device):
        self.nvml, self.device = nvml, device
        self.max_sm_mhz = nvml.max_sm_clock(device)
        self.uuid, self.name = nvml.uuid(device), nvml.name(device)
        self.driver_version = nvml.driver_version()

    def read(self):
        return (self.nvml.sm_clock(self.device), self.nvml.clock_event_reasons(self.device))


def run_command(argv):
    """(exit status, stdout, stderr) of argv; ClocksError where it cannot be started or hangs."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise NotInstalled(f"{argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise ClocksError(f"{argv[0]} did not answer in 30 s") from None
    return done.returncode, done.stdout, done.stderr


def _number(text):
    """nvidia-smi's integer or hexadecimal field, or None ("[N/A]", "[Not Supported]")."""
    try:
        return int(text, 0)
    except (TypeError, ValueError):
        return None


class SmiReader:
    """One GPU's clocks through nvidia-smi, where NVML cannot be opened from Python: a process a
    reading (tens of milliseconds, after the timed region, so not in any sample). `run(argv)` is
    run_command or a fake with its contract; the GPU is named by --id (a UUID, PCI bus id or index).
    The throttle reasons' field is the older name first, then the one drivers of CUDA 12.2 on use."""
    source = "nvidia-smi"
    REASON_FIELDS = ("clocks_throttle_reasons.active", "clocks_event_reasons.active")

    def __init__(self, run, gpu_id):
        self.run, self.gpu_id = run, gpu_id
        self.name, self.uuid, self.driver_version, max_sm = self._query("name,uuid,driver_version,clocks.max.sm", 4)
        self.max_sm_mhz = _number(max_sm)
        failures = []
        for field in self.REASON_FIELDS:
            try:
                self._query(f"{field},clocks.sm", 2)
                self.reasons_field = field
                break
            except ClocksError as error:
                failures.append(str(error))
        else:
            raise ClocksError("; ".join(failures))

    def _query(self, fields, count):
        argv = ["nvidia-smi", f"--id={self.gpu_id}", f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
        status, out, err = self.run(argv)
        lines = out.strip().splitlines()
        if status != 0 or not lines:
            why = (err.strip() or out.strip() or f"exit {status}").splitlines()[0]
            raise ClocksError(f"nvidia-smi --id={self.gpu_id} --query-gpu={fields}: {why}")
        values = [v.strip() for v in lines[0].rsplit(",", count - 1)]  # a GPU's name may hold a comma
        if len(values) != count:
            raise ClocksError(f"nvidia-smi --query-gpu={fields} answered '{lines[0]}'")
        return values

    def read(self):
        try:
            reasons, sm = self._query(f"{self.reasons_field},clocks.sm", 2)
        except ClocksError:
            return (None, None)
        return (_number(sm), _number(reasons))


def nvml_keys(uuid=None, pci_bus_id=None, index=None, visible_devices=None):
    """How to name the torch device to NVML (and nvidia-smi), best first: its UUID ("GPU-…"), its PCI
    bus id, and its index only where CUDA_VISIBLE_DEVICES is unset (both ignore it, so an index would
    name another GPU)."""
    keys = []
    if uuid:
        uuid = str(uuid)
        keys.append(("uuid", uuid if uuid.startswith(("GPU-", "MIG-")) else "GPU-" + uuid))
    if pci_bus_id:
        keys.append(("pci_bus_id", pci_bus_id))
    if index is not None and not visible_devices:
        keys.append(("index", index))
    return keys


class GpuClocks:
    """A clock reader opened on one GPU, or why none could be: `available`, `why_not` (None when
    available), `source` ("nvml" or "nvidia-smi"), `read()` -> (sm_clock_mhz, clock_event_reasons),
    `max_sm_mhz`, `uuid`, `name`, `driver_version`, `found_by` (how the GPU was named: "uuid",
    "pci_bus_id" or "index")."""

    def __init__(self, reader=None, found_by=None, why_not=None):
        self.reader, self.found_by = reader, found_by
        self.available = reader is not None
        self.why_not = None if self.available else (why_not or "no clock reader was opened")
        self.source = reader.source if self.available else None
        self.max_sm_mhz = reader.max_sm_mhz if self.available else None
        self.uuid = reader.uuid if self.available else None
        self.name = reader.name if self.available else None
        self.driver_version = reader.driver_version if self.available else None

    def read(self):
        return self.reader.read()

    @property
    def read_clock(self):
        """The reader interleave() calls after each timed region; None without one."""
        return self.read if self.available else None

    def describe(self):
        """"nvml", "nvidia-smi" or "not read: <why>"."""
        return self.source if self.available else f"not read: {self.why_not}"

    def meta(self):
        """meta.gpu's keys about the clocks."""
        return {"clocks": self.describe(), "clocks_found_by": self.found_by, "sm_clock_max_mhz": self.max_sm_mhz}


def open_clocks(keys, loader=None, run=None):
    """GpuClocks of the first of keys (nvml_keys) that NVML knows, else that nvidia-smi knows.
    loader(name) loads NVML's library (ctypes.CDLL by default), run(argv) runs nvidia-smi
    (run_command by default); tests pass fakes. Neither answering gives a GpuClocks that says why,
    never an exception."""
    if not keys:
        return GpuClocks(why_not="no way to name the GPU (no UUID or PCI bus id, and CUDA_VISIBLE_DEVICES is set)")
    loader, run = loader or ctypes.CDLL, run or run_command
    failures = []
    try:
        nvml = Nvml(loader(NVML_LIBRARY))
    except OSError:
        failures.append(NVML_NOT_INSTALLED)
    except ClocksError as error:
        failures.append(str(error))
    else:
        for how, key in keys:
            try:
                return GpuClocks(NvmlReader(nvml, nvml.handle(how, key)), how)
            except ClocksError as error:
                failures.append(str(error))
    for how, key in keys:
        try:
            return GpuClocks(SmiReader(run, key), how)
        except NotInstalled as error:
            failures.append(str(error))
            break
        except ClocksError as error:
            failures.append(str(error))
    return GpuClocks(why_not="; ".join(failures))


# ---------------------------------------------------------------------------------------------------
# The spin before each timed region, and the protocol on torch's CUDA device

def occupy_cycles(occupy_ms, clock_rate_khz=None, max_sm_mhz=None, cycles_per_ms=None):
    """(cycles, source) of a spin of occupy_ms milliseconds: from the device's clock rate [kHz] where
    torch reports it, else the maximum SM clock [MHz] the clock reader reports (at a lower clock the
    spin lasts longer, never shorter), else a rate measured with events (calibrate_cycles_per_ms).
    0 cycles: no spin."""
    if occupy_ms <= 0:
        return 0, "off"
    for rate, source in ((clock_rate_khz, "clock_rate"), (max_sm_mhz and max_sm_mhz * 1000.0, "max_sm_clock"),
                         (cycles_per_ms, "calibrated")):
        if rate and rate > 0:
            return int(round(occupy_ms * rate)), source
    raise ValueError("no clock rate to size the spin with")


def calibrate_cycles_per_ms(torch, cycles=1 << 21, repeats=5):
    """Clock cycles per millisecond of torch.cuda._sleep, measured once with CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)
    rates = []
    for _ in range(repeats):
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        rates.append(cycles / start.elapsed_time(end))
    return statistics.median(rates)


def torch_device_keys(torch, index):
    """nvml_keys for torch's CUDA device `index` (its UUID and PCI bus id where torch reports them)."""
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    pci = None
    if all(hasattr(props, name) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        pci = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    return nvml_keys(str(uuid) if uuid else None, pci, index, os.environ.get("CUDA_VISIBLE_DEVICES"))


class CudaProtocol:
    """The CUDA side of the protocol on torch's current device: the clocks on it, the spin's length,
    timed(fn) (one timed region: the spin, the start event, fn(), the end event, its wait), run(jobs)
    (interleave with the clocks read after every region) and summaries(job)."""

    def __init__(self, torch, args, loader=None, run=None):
        self.torch = torch
        self.index = torch.cuda.current_device()
        self.clocks = open_clocks(torch_device_keys(torch, self.index), loader, run)
        self.threshold = args.throttle_threshold
        self.occupy_ms = args.occupy_ms
        self.min_unthrottled = args.min_samples
        clock_rate = getattr(torch.cuda.get_device_properties(self.index), "clock_rate", None)
        rate = None
        if not clock_rate and not self.clocks.max_sm_mhz and self.occupy_ms > 0:
            rate = calibrate_cycles_per_ms(torch)
        self.cycles, self.cycles_from = occupy_cycles(self.occupy_ms, clock_rate, self.clocks.max_sm_mhz, rate)
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def timed(self, fn):
        """Milliseconds of fn()'s work on the GPU, started after a spin of occupy_ms."""
        if self.cycles:
            self.torch.cuda._sleep(self.cycles)
        self.start.record()
        fn()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end)

    def run(self, jobs, args):
        """interleave() with this GPU's clocks read after every timed region."""
        self.torch.cuda.synchronize()
        return interleave(jobs, args, self.clocks.read_clock)

    def summaries(self, job):
        return job.summaries(self.clocks, self.threshold, self.min_unthrottled)

    def meta(self):
        """meta.timing: the protocol as this run followed it."""
        return {"protocol": "interleaved", "occupy_ms": self.occupy_ms, "occupy_cycles": self.cycles,
                "occupy_cycles_from": self.cycles_from, "throttle_threshold": self.threshold,
                "throttle_reason_mask": THROTTLE_MASK, "sm_clock_max_mhz": self.clocks.max_sm_mhz,
                "min_unthrottled_samples": self.min_unthrottled, "clocks": self.clocks.describe()}

    def provenance(self):
        return provenance(self.torch, self.clocks, self.index)


_PROTOCOLS = {}


def cuda_protocol(torch, args):
    """One CudaProtocol per device and process (the clocks opened, the spin sized, once)."""
    index = torch.cuda.current_device()
    if index not in _PROTOCOLS:
        _PROTOCOLS[index] = CudaProtocol(torch, args)
    return _PROTOCOLS[index]


def cuda_sample(fn, args, before=None):
    """One region alone on CUDA under the protocol (the spin before each sample, the clocks after):
    summary() of fn()'s times (torch is imported here: the CPU peers need none)."""
    import torch
    protocol = cuda_protocol(torch, args)
    job = protocol.run([Job("only", [("only", lambda: protocol.timed(fn))], before=before)], args)[0]
    if job.error is not None:
        raise job.error
    return protocol.summaries(job)["only"]


def driver_version_from(path=DRIVER_VERSION_FILE):
    """The kernel driver's version from /proc/driver/nvidia/version ("... Kernel Module [for x86_64]
    580.95.05 ..."), or None."""
    try:
        with open(path) as fh:
            found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", fh.read())
    except OSError:
        return None
    return found.group(1) if found else None


def provenance(torch, clocks=None, index=None, driver_file=DRIVER_VERSION_FILE):
    """What ran it: torch, cuDNN, the CUDA runtime torch carries, the driver (the clock reader's, else
    the kernel module's), the GPU's name and UUID (the clock reader's where it answers, else torch's),
    how the clocks were read. Keys are null where not known (a CPU peer: no GPU)."""
    cuda = bool(torch is not None and getattr(torch.version, "cuda", None) and torch.cuda.is_available())
    cudnn = name = uuid = driver = None
    if cuda:
        try:
            cudnn = torch.backends.cudnn.version()
        except (AttributeError, RuntimeError):
            pass
        index = torch.cuda.current_device() if index is None else index
        props = torch.cuda.get_device_properties(index)
        name = props.name
        torch_uuid = getattr(props, "uuid", None)
        uuid = f"GPU-{torch_uuid}" if torch_uuid else None
        driver = driver_version_from(driver_file)
    available = clocks is not None and clocks.available
    return {"torch": torch.__version__ if torch is not None else None, "cudnn": cudnn,
            "cuda_runtime": getattr(torch.version, "cuda", None) if torch is not None else None,
            "driver_version": (clocks.driver_version if available and clocks.driver_version else driver),
            "gpu_name": (clocks.name if available and clocks.name else name),
            "gpu_uuid": (clocks.uuid if available and clocks.uuid else uuid),
            "clocks": clocks.describe() if clocks is not None else None}


def add_arguments(parser, warmup, max_samples, max_time, per="implementation"):
    """The stopping rule's and the protocol's options, as flashbench run names them, with a script's
    own defaults."""
    parser.add_argument("--warmup", type=int, default=warmup, help=f"untimed runs of each {per} first")
    parser.add_argument("--min-samples", type=int, default=5,
                        help="at least this many samples; throttled ones are left out of the median only "
                             "where this many unthrottled ones remain")
    parser.add_argument("--max-samples", type=int, default=max_samples)
    parser.add_argument("--max-noise", type=float, default=0.02,
                        help="stop once the median's ~95%% confidence half-width is this fraction of it")
    parser.add_argument("--max-time", type=float, default=max_time,
                        help=f"or once this many seconds went into samples of one {per} and configuration")
    parser.add_argument("--occupy-ms", type=float, default=0.5,
                        help="CUDA: milliseconds of GPU spin queued before each timed region (0: none)")
    parser.add_argument("--throttle-threshold", type=float, default=0.95,
                        help="CUDA: a sample below this fraction of the maximum SM clock is throttled")
