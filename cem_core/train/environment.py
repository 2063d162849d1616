"""The trainer's record of what a run trained on, and its system samples (`environment.json`, metrics kind "system").

    monitor = RunMonitor.start(rd, cfg, st, dev, world, attempt=2, code="9f3a61c0b2d4")   # rank 0, attempt start
    monitor.stop()                                                                         # end: peaks, ended_at

`gather_environment` describes the machine in well under 100 ms on a CPU (no
subprocess, no network; /proc read where there is one): host, CPU model and count,
GPU model, memory and capability, driver, CUDA and cuDNN versions, torch / Python /
cemctl versions, the code fingerprint and the launch's code snapshot
($CEMCTL_SNAPSHOT). `peaks` adds, at the end of the attempt, the process's peak
resident memory (VmHWM, else ru_maxrss) and its peak GPU memory
(torch.cuda.max_memory_allocated / reserved).

`SystemSampler` is a daemon thread that every `train.system_every_s` seconds (0: off)
appends one metrics line of kind "system" (`cem_core.runfiles.environment`): CPU
time of the process and busy time of the machine over the interval, resident and
available memory, and on CUDA the GPU's memory from torch and, when `pynvml`
imports, its utilisation and device memory. The first sample comes one interval
after the start (a run shorter than that has none; its peaks are in
environment.json). Nothing GPU-specific is imported or called on a CPU run.

Recording never fails a run: a probe that raises is logged once and left out.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import resource
import sys
import threading
import time
from typing import Any, Callable

import torch

from cem_core.runfiles import RunDir, hostname
from cem_core.runfiles.environment import (
    SYSTEM_KIND,
    SYSTEM_METRICS,
    check_environment,
    read_environment,
    write_environment,
)
from cem_core.train.console import LOGGER_NAME

log = logging.getLogger(LOGGER_NAME)

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


# ---------------------------------------------------------------------------
# Small readers (Linux /proc where present; None elsewhere)


def _read_text(path: str, max_bytes: int = 1 << 16) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(max_bytes).decode(errors="replace")
    except OSError:
        return None


def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo: only its first block is read, which costs the kernel one CPU)."""
    text = _read_text("/proc/cpuinfo", 8192)
    if text:
        for key in ("model name", "Model", "Hardware", "cpu model", "Processor"):
            m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.M)
            if m and m.group(1).strip():
                return m.group(1).strip()
    return None


def cpus_usable() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def cemctl_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cemctl")
    except PackageNotFoundError:
        return None


def nvidia_driver_version() -> str | None:
    """The NVIDIA kernel driver's version from /proc/driver/nvidia/version (Linux), else from NVML."""
    text = _read_text("/proc/driver/nvidia/version", 4096)
    m = re.search(r"Kernel Module(?: for \S+)?\s+([0-9][0-9.]*)", text or "")
    if m:
        return m.group(1)
    nvml = _import_nvml()
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
        value = nvml.nvmlSystemGetDriverVersion()
        return value.decode() if isinstance(value, bytes) else str(value)
    except Exception:  # noqa: BLE001 - NVML present but unusable (no driver access): unknown
        return None


def _import_nvml() -> Any | None:
    """pynvml (the nvidia-ml-py package) if it imports; called only on CUDA runs."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - absent, or a broken install: torch's numbers only
        return None
    return pynvml


def rss_bytes() -> int | None:
    """The process's resident memory now (/proc/self/statm)."""
    text = _read_text("/proc/self/statm", 256)
    try:
        return int(text.split()[1]) * _PAGE_BYTES if text else None
    except (IndexError, ValueError):
        return None


def peak_rss_bytes() -> int | None:
    """The process's peak resident memory: VmHWM (/proc/self/status), else ru_maxrss (KiB on Linux, bytes on macOS)."""
    text = _read_text("/proc/self/status", 1 << 14)
    m = re.search(r"^VmHWM:\s*(\d+)\s*kB", text or "", re.M)
    if m:
        return int(m.group(1)) * 1024
    try:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (OSError, ValueError):
        return None
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def mem_available_bytes() -> int | None:
    text = _read_text("/proc/meminfo", 4096)
    m = re.search(r"^MemAvailable:\s*(\d+)\s*kB", text or "", re.M)
    return int(m.group(1)) * 1024 if m else None


def machine_cpu_times() -> tuple[float, float] | None:
    """(busy, total) CPU ticks of the whole machine since boot (/proc/stat), or None."""
    text = _read_text("/proc/stat", 4096)
    if not text or not text.startswith("cpu "):
        return None
    try:
        ticks = [float(v) for v in text.split("\n", 1)[0].split()[1:]]
    except ValueError:
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0.0)  # idle + iowait
    total = sum(ticks[:8])  # guest time is counted in user already
    return total - idle, total


def process_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


# ---------------------------------------------------------------------------
# The environment record


def gather_environment(dev: torch.device, *, attempt: int, world_size: int = 1, code_fingerprint: str | None = None,
                       system_every_s: float = 0.0, now: float | None = None) -> dict[str, Any]:
    """What this attempt trains on (the fields of `cem_core.runfiles.environment.ENVIRONMENT_FIELDS`)."""
    t0 = time.perf_counter()
    uname = os.uname() if hasattr(os, "uname") else None
    env: dict[str, Any] = {
        "attempt": attempt,
        "hostname": hostname(),
        "started_at": time.time() if now is None else now,
        "ended_at": None,
        "platform": f"{uname.sysname}-{uname.release}-{uname.machine}" if uname else sys.platform,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": cpus_usable(),
        "torch_threads": torch.get_num_threads(),
        "device": str(dev),
        "world_size": world_size,
        "python_version": platform.python_version(),
        "torch_version": str(torch.__version__),
        "cemctl_version": cemctl_version(),
        "code_fingerprint": code_fingerprint,
        "code_snapshot": os.environ.get("CEMCTL_SNAPSHOT") or None,
        "system_every_s": float(system_every_s),
    }
    if dev.type == "cuda":
        env.update(_gpu_environment(dev))
    env["gather_ms"] = round((time.perf_counter() - t0) * 1000, 3)
    return env


def _gpu_environment(dev: torch.device) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(dev)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "gpu_model": props.name,
        "gpu_count": torch.cuda.device_count(),
        "gpu_memory_bytes": int(props.total_memory),
        "gpu_capability": f"{props.major}.{props.minor}",
        "cuda_version": torch.version.cuda,
        "cudnn_version": str(cudnn) if cudnn is not None else None,
        "driver_version": nvidia_driver_version(),
    }


def peaks(dev: torch.device | None) -> dict[str, Any]:
    """Peak memory of this process so far: host (resident) and, on CUDA, the allocator's."""
    out: dict[str, Any] = {"peak_host_rss_bytes": peak_rss_bytes()}
    if dev is not None and dev.type == "cuda":
        out["peak_gpu_allocated_bytes"] = int(torch.cuda.max_memory_allocated(dev))
        out["peak_gpu_reserved_bytes"] = int(torch.cuda.max_memory_reserved(dev))
    return out


def with_earlier(record: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """`record` (this attempt) with the earlier attempts of `previous` (the file as found) kept."""
    if previous is None:
        return {**record, "earlier_attempts": []}
    earlier = list(previous.get("earlier_attempts") or [])
    if previous.get("attempt") != record["attempt"]:
        earlier.append({k: v for k, v in previous.items() if k != "earlier_attempts"})
    return {**record, "earlier_attempts": earlier}


# ---------------------------------------------------------------------------
# System samples


class _GpuProbe:
    """The run's GPU: memory from torch; utilisation and device memory from NVML when pynvml imports. The NVML
    handle is looked up once, in the sampling thread (nvmlInit can take a while): by the device's UUID, else by
    its index when no CUDA_VISIBLE_DEVICES renumbers the devices. `nvml` and `uuid` are for tests."""

    def __init__(self, dev: torch.device, nvml: Any | None = None, uuid: str | None = None) -> None:
        self.dev = dev
        self._nvml, self._uuid = nvml, uuid
        self._handle: Any = None
        self._resolved = False

    def _nvml_handle(self) -> Any:
        if self._resolved:
            return self._handle
        self._resolved = True
        nvml = self._nvml if self._nvml is not None else _import_nvml()
        if nvml is None:
            return None
        try:
            nvml.nvmlInit()
            uuid = self._uuid or getattr(torch.cuda.get_device_properties(self.dev), "uuid", None)
            if uuid is not None:
                self._handle = nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
            elif not os.environ.get("CUDA_VISIBLE_DEVICES"):  # torch's index is NVML's
                self._handle = nvml.nvmlDeviceGetHandleByIndex(self.dev.index or 0)
        except Exception as e:  # noqa: BLE001 - NVML unusable: torch's memory numbers only
            log.info("system samples: no GPU utilisation (NVML: %s)", " ".join(str(e).split())[:200])
            self._handle = None
        self._nvml = nvml
        return self._handle

    def read(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "gpu_mem_allocated_bytes": int(torch.cuda.memory_allocated(self.dev)),
            "gpu_mem_reserved_bytes": int(torch.cuda.memory_reserved(self.dev)),
            "gpu_util_pct": None, "gpu_mem_used_bytes": None,
        }
        handle = self._nvml_handle()
        if handle is not None:
            out["gpu_util_pct"] = float(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)  # type: ignore[union-attr]
            out["gpu_mem_used_bytes"] = int(self._nvml.nvmlDeviceGetMemoryInfo(handle).used)  # type: ignore[union-attr]
        return out


class SystemSampler:
    """Appends a system sample every `every_s` seconds from a daemon thread (`start` / `stop`); `sample()` takes
    one now. `write` receives each metrics line; `progress` returns (step, tokens, training time in s).
    `clock` (monotonic seconds) and `gpu` are for tests."""

    def __init__(self, write: Callable[[dict[str, Any]], None], progress: Callable[[], tuple[int, int, float]], *,
                 every_s: float, attempt: int, dev: torch.device | None = None,
                 clock: Callable[[], float] = time.monotonic, gpu: Any | None = None) -> None:
        self.write, self.progress = write, progress
        self.every_s, self.attempt = float(every_s), attempt
        self.clock = clock
        self.gpu = gpu if gpu is not None else (_GpuProbe(dev) if dev is not None and dev.type == "cuda" else None)
        self.samples = 0
        self._last = self._baseline()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False

    def _baseline(self) -> tuple[float, float, tuple[float, float] | None]:
        return self.clock(), process_cpu_s(), machine_cpu_times()

    def start(self) -> "SystemSampler":
        if self.every_s > 0:
            self._last = self._baseline()
            self._thread = threading.Thread(target=self._run, name="cemctl-system-samples", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def measure(self) -> dict[str, Any]:
        """The SYSTEM_METRICS over the interval since the last measurement (or the start)."""
        now, cpu, machine = self._baseline()
        last_now, last_cpu, last_machine = self._last
        self._last = (now, cpu, machine)
        wall = now - last_now
        out: dict[str, Any] = dict.fromkeys(k for k in SYSTEM_METRICS if self.gpu is not None or not k.startswith("gpu_"))
        out["cpu_process_pct"] = round(100.0 * (cpu - last_cpu) / wall, 2) if wall > 0 else None
        if machine is not None and last_machine is not None and machine[1] > last_machine[1]:
            out["cpu_machine_pct"] = round(100.0 * (machine[0] - last_machine[0]) / (machine[1] - last_machine[1]), 2)
        out["rss_bytes"] = rss_bytes()
        out["host_mem_available_bytes"] = mem_available_bytes()
        if self.gpu is not None:
            out.update(self.gpu.read())
        return out

    def sample(self) -> dict[str, Any] | None:
        """Measure and write one metrics line (None if measuring or writing failed: logged once, never raised)."""
        try:
            step, tokens, time_s = self.progress()
            line = {"kind": SYSTEM_KIND, "step": int(step), "series": f"{self.attempt}.{self.samples}",
                    "tokens": int(tokens), "time_s": round(float(time_s), 3), "attempt": self.attempt,
                    "sample": self.samples, "unix_s": round(time.time(), 3), **self.measure()}
            self.write(line)
        except Exception as e:  # noqa: BLE001 - a sample is never worth a run
            if not self._failed:
                log.warning("system sample failed (%s: %s); training goes on", type(e).__name__,
                            " ".join(str(e).split())[:200])
                self._failed = True
            return None
        self.samples += 1
        return line

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None


# ---------------------------------------------------------------------------
# What the training loop calls


class RunMonitor:
    """One attempt's environment.json and system samples (rank 0). `stop` is idempotent."""

    def __init__(self, rd: RunDir, dev: torch.device, record: dict[str, Any] | None,
                 sampler: SystemSampler | None) -> None:
        self.rd, self.dev, self.record, self.sampler = rd, dev, record, sampler
        self.stopped = False

    @classmethod
    def start(cls, rd: RunDir, cfg: Any, st: Any, dev: torch.device, world: Any, *, attempt: int,
              code: str | None = None) -> "RunMonitor":
        """Write environment.json for this attempt and start the system samples (`cfg.train.system_every_s`)."""
        every_s = float(getattr(cfg.train, "system_every_s", 0.0))
        record = None
        try:
            previous = _previous_environment(rd)
            record = with_earlier(gather_environment(dev, attempt=attempt, world_size=world.size, code_fingerprint=code,
                                                     system_every_s=every_s), previous)
            write_environment(rd.path, record)
            log.info("environment: %s, %s%s; torch %s, python %s (gathered in %.1f ms)", record["hostname"],
                     record.get("cpu_model") or "cpu", f", {record['gpu_model']}" if record.get("gpu_model") else "",
                     record["torch_version"], record["python_version"], record["gather_ms"])
        except Exception as e:  # noqa: BLE001 - recording the machine never fails a run
            log.warning("environment.json not written (%s: %s)", type(e).__name__, " ".join(str(e).split())[:200])
            record = None
        sampler = None
        if every_s > 0:
            sampler = SystemSampler(rd.append_metrics, lambda: (st.step, st.tokens, st.elapsed_s()), every_s=every_s,
                                    attempt=attempt, dev=dev).start()
        return cls(rd, dev, record, sampler)

    def stop(self) -> None:
        """Stop the samples; write the attempt's end time and peak memory into environment.json."""
        if self.stopped:
            return
        self.stopped = True
        if self.sampler is not None:
            self.sampler.stop()
        if self.record is None:
            return
        try:
            self.record = check_environment({**self.record, **peaks(self.dev), "ended_at": time.time()})
            write_environment(self.rd.path, self.record)
        except Exception as e:  # noqa: BLE001 - as above
            log.warning("environment.json: peaks not written (%s: %s)", type(e).__name__, " ".join(str(e).split())[:200])


def _previous_environment(rd: RunDir) -> dict[str, Any] | None:
    """The record an earlier attempt left (None if none, or if it was damaged: then it is replaced, with a warning)."""
    from cem_core.errors import ConfigError

    try:
        return read_environment(rd.path)
    except ConfigError as e:
        log.warning("%s; writing a new one", e)
        return None
