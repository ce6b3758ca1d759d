"""The CPU a bench ran on, named as the results pages print it: its model name from
/proc/cpuinfo, then its family and model numbers and the vector instructions the kernels choose
by (a name such as "AMD EPYC" alone does not tell a Zen 3 from a Zen 5); and how every system
is held to AVX2 on a CPU that has more (`bench.py --isa avx2`)."""
import functools
import os
import platform

# What holds each system to AVX2 and FMA: tchseq's kernels (TCHSEQ_CPU_FEATURES_OFF), libtorch's
# own kernels (ATen's dispatch) for tchseq and fairseq, MKL and oneDNN for all three, and
# CTranslate2's own dispatch (CT2_FORCE_CPU_ISA).
AVX2_ENV = {
    "TCHSEQ_CPU_FEATURES_OFF": "avx512f avx512_vnni avx512_bf16 avx512_fp16",
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "CT2_FORCE_CPU_ISA": "AVX2",
}
PINNED = set()


def pin(isa_name):
    """Holds this process and every process it starts to `isa_name` ("native" or "avx2")."""
    if isa_name == "avx2":
        os.environ.update(AVX2_ENV)
        PINNED.add("avx2")

@functools.lru_cache(maxsize=None)
def cpuinfo():
    """The first processor's fields (read once a process; do not change the dict)."""
    fields = {}
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def flags(info=None):
    return set((info if info is not None else cpuinfo()).get("flags", "").split())


def bf16():
    """Whether this CPU runs `--compute-type bfloat16` (AVX512_BF16), as pinned."""
    return "avx512_bf16" in flags() and "avx2" not in PINNED


def isa(have):
    """The vector instructions of `have` (cpuinfo flags) that tchseq's kernels choose by."""
    if "avx512f" in have:
        extras = [name for flag, name in (("avx512_bf16", "BF16"), ("avx512_vnni", "VNNI")) if flag in have]
        return "AVX-512" + (f" ({', '.join(extras)})" if extras else "")
    if "avx2" in have and "fma" in have:
        return "AVX2 and FMA, no AVX-512"
    return "no AVX2"


def describe():
    """For example "AMD EPYC; family 25, model 1; AVX2 and FMA, no AVX-512"."""
    info = cpuinfo()
    name = info.get("model name") or platform.processor() or "unknown CPU"
    parts = [name]
    if "cpu family" in info and "model" in info:
        parts.append(f"family {info['cpu family']}, model {info['model']}")
    parts.append(isa(flags(info)))
    if "avx2" in PINNED and "avx512f" in flags(info):
        parts.append("every system held to AVX2 and FMA")
    return "; ".join(parts)
