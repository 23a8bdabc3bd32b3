"""Write one benchmark's figures into BENCHMARKS.md, replacing that benchmark's previous section.

Each section carries the machine description and the date, so figures are never
read without knowing where they came from.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
from pathlib import Path

import numpy as np

BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def machine() -> str:
    """One line: CPU model and ISA (the vector/matrix extensions that decide bf16 speed), cores, memory, OS, versions."""
    cpu = platform.processor() or platform.machine()
    try:
        info = dict(
            line.split(":", 1)
            for line in Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines()
            if ":" in line
        )
        info = {k.strip(): v.strip() for k, v in info.items()}
        cpu = info.get("model name", cpu)
        if "cpu family" in info:
            cpu += f" (family {info['cpu family']}, model {info.get('model', '?')})"
        flags = info.get("flags", "").split()
        isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
        cpu += f", ISA {'+'.join(isa) or 'no AVX2'}"
    except (OSError, ValueError):
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )


def record(name: str, body: str, command: str, machine_line: str | None = None, date: str | None = None) -> None:
    """Replace (or append) the section ``name`` of BENCHMARKS.md with ``body``.

    ``machine_line``/``date`` name another machine and day (figures measured on a lent GPU
    and brought back as a file); by default, this machine and today.
    """
    today = date or _dt.date.today().isoformat()
    section = (
        f"<!-- bench:{name} -->\n## {name}\n\n"
        f"Machine: {machine_line or machine()}  \nDate: {today}  \nReproduce: `{command}`\n\n{body.strip()}\n"
        f"<!-- /bench:{name} -->\n"
    )
    text = (
        BENCHMARKS_MD.read_text()
        if BENCHMARKS_MD.exists()
        else "# Benchmarks\n\nFigures written by the scripts in `benchmarks/`; each section says where and when it was measured.\n\n"
    )
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->\n", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text + "\n" + section
    BENCHMARKS_MD.write_text(text)
    print(section)
