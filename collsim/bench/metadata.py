"""Facts about the machine and the environment a benchmark ran in (no torch needed).

Examples
--------
>>> env = relevant_env({"NCCL_ALGO": "Ring", "GLOO_SOCKET_IFNAME": "lo", "HOME": "/root", "OMP_NUM_THREADS": "1"})
>>> env
{'GLOO_SOCKET_IFNAME': 'lo', 'NCCL_ALGO': 'Ring', 'OMP_NUM_THREADS': '1'}
>>> cpu_model_from_cpuinfo("processor : 0\\nmodel name : Intel(R) Xeon(R) Processor\\n")
'Intel(R) Xeon(R) Processor'
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ENV_NAMES",
    "ENV_PREFIXES",
    "cpu_model",
    "cpu_model_from_cpuinfo",
    "host_facts",
    "now_iso",
    "relevant_env",
]

#: Environment variables recorded with a measurement: every name with one of these prefixes ...
ENV_PREFIXES: tuple[str, ...] = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_GLOO_", "TORCH_DISTRIBUTED_")
#: ... and these names (threads and visible GPUs change what is measured).
ENV_NAMES: tuple[str, ...] = ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS")


def relevant_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The NCCL_*, GLOO_*, TORCH_NCCL_* ... variables and thread/GPU settings of ``environ``, sorted by name."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


def cpu_model_from_cpuinfo(text: str) -> str | None:
    """The first ``model name`` of a ``/proc/cpuinfo`` text, or None."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name" and value.strip():
            return value.strip()
    return None


def cpu_model() -> str:
    """The CPU model name (Linux: /proc/cpuinfo), else ``platform.processor()``, else ``"unknown"``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            model = cpu_model_from_cpuinfo(fh.read())
    except OSError:
        model = None
    return model or platform.processor() or "unknown"


def _memory_gib() -> float | None:
    """Total memory in GiB (2**30 bytes) from /proc/meminfo, or None."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) * 1024 / 2**30, 1)  # kB (KiB) to bytes to GiB
    except (OSError, ValueError, IndexError):
        return None
    return None


def host_facts() -> dict[str, Any]:
    """This host: hostname, CPU model, logical CPUs, memory (GiB), OS and Python."""
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def now_iso() -> str:
    """The current time, ISO 8601 in UTC to the second (e.g. ``2025-01-31T12:00:00+00:00``)."""
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
