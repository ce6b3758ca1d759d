#!/usr/bin/env python3
"""What auditwheel checks, for a wheel whose libtorch comes from its torch dependency:

    python python/check_wheel.py dist/tchseq-*.whl

Every ELF file in the wheel may need only torch's own libraries (libtorch_cpu, libc10, libgomp: the
`torch==` dependency installs them, and the package imports torch before its extension, as the
launcher finds them before tchseq-core starts) and the manylinux base libraries, and no symbol
version newer than the wheel's manylinux tag allows (auditwheel's policy for that glibc). It also
checks that the wheel declares its torch dependency and holds the `tchseq` command. Exits 1 with
one line per problem. Needs binutils' readelf.
"""
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# libgomp.so.1 ships in torch's lib directory too: the host kernels share libtorch's OpenMP runtime
TORCH_LIBS = {"libtorch_cpu.so", "libc10.so", "libgomp.so.1"}
# auditwheel's manylinux base libraries (policy.json, "lib_whitelist")
BASE_LIBS = {"libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1",
             "libutil.so.1", "libpthread.so.0", "libresolv.so.2", "libX11.so.6", "libXext.so.6", "libXrender.so.1",
             "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0",
             "ld-linux-x86-64.so.2", "libz.so.1", "libexpat.so.1"}
# auditwheel's symbol-version ceilings for manylinux_2_34 on x86_64
CEILINGS = {"GLIBC": (2, 34), "GLIBCXX": (3, 4, 29), "CXXABI": (1, 3, 13), "GCC": (12, 0, 0)}


def version(text):
    return tuple(int(p) for p in text.split("."))


def elf_problems(path, name):
    problems = []
    dynamic = subprocess.run(["readelf", "-dW", str(path)], capture_output=True, text=True, check=True).stdout
    for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic):
        if lib not in TORCH_LIBS | BASE_LIBS:
            problems.append(f"{name} needs {lib}, which is neither torch's nor a manylinux base library")
    versions = subprocess.run(["readelf", "-VW", str(path)], capture_output=True, text=True, check=True).stdout
    for kind, ver in set(re.findall(r"Name: (GLIBC|GLIBCXX|CXXABI|GCC)_([0-9.]+)", versions)):
        if version(ver) > CEILINGS[kind]:
            problems.append(f"{name} needs {kind}_{ver}, newer than manylinux_2_34 allows")
    return problems


def main(wheel):
    wheel = Path(wheel)
    problems = []
    if "manylinux_2_34_x86_64" not in wheel.name or "-cp39-abi3-" not in wheel.name:
        problems.append(f"{wheel.name}: not a cp39-abi3 manylinux_2_34_x86_64 wheel")
    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory() as tmp:
        names = z.namelist()
        for want in ("tchseq/_native.abi3.so", "scripts/tchseq", "scripts/tchseq-core"):
            if not any(n.endswith(want) for n in names):
                problems.append(f"{wheel.name} has no {want}")
        metadata = next((z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA")), "")
        if not re.search(r"^Requires-Dist: torch==2\.13\.", metadata, re.M):
            problems.append(f"{wheel.name} does not require torch==2.13.*")
        elves = 0
        for n in names:
            data = z.read(n)
            if data[:4] != b"\x7fELF":
                continue
            elves += 1
            path = Path(tmp) / "elf"
            path.write_bytes(data)
            problems += elf_problems(path, n)
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if not problems:
        print(f"{wheel.name}: {elves} ELF files need only torch's libraries and the manylinux_2_34 base")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python python/check_wheel.py WHEEL", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
