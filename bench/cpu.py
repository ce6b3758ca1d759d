"""The CPU a bench ran on, named as the results pages print it: its model name from
/proc/cpuinfo, then its family and model numbers and the vector instructions the kernels choose
by (a name such as "AMD EPYC" alone does not tell a Zen 3 from a Zen 5)."""
import functools
import platform

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
    """Whether this CPU runs `--compute-type bfloat16` (AVX512_BF16)."""
    return "avx512_bf16" in flags()


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
    return "; ".join(parts)
