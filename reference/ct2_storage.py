"""Goldens of CTranslate2's own float16 and int16 storage (tests/fixtures/ct2/storage.json).

    python reference/ct2_storage.py OUT.json NAME=DIR[:ARGV_JSON] ...

For every stored variable of each DIR/model.bin (read as ct2_check.read_model_bin documents the
format), the values CTranslate2 stored and what they dequantize to: float16 widened to float32;
int16 as `q * (1 / scale)` in float32 (`ops::Dequantize`'s CPU kernel, with `<name>_scale` the
tensor's scale, or CTranslate2's global 1000 when none is stored). The tests read the same files with tchseq and
compare: exact sums of the stored values, the first values and float sums of the dequantized ones.
"""
import json
import struct
import sys

import numpy as np

DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")
HEAD = 8


def read_arrays(path):
    data = open(path, "rb").read()
    off = 0

    def u(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, data, off)
        off += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal off
        n = u("H")
        s = data[off:off + n - 1].decode("utf-8")
        off += n
        return s

    version = u("I")
    spec = string()
    revision = u("I")
    arrays = {}
    for _ in range(u("I")):
        name = string()
        shape = [u("I") for _ in range(u("B"))]
        dtype = DTYPES[u("B")]
        nbytes = u("I")
        arrays[name] = np.frombuffer(data[off:off + nbytes], dtype=dtype).reshape(shape)
        off += nbytes
    aliases = {string(): string() for _ in range(u("I"))}
    assert off == len(data), (off, len(data))
    return version, spec, revision, arrays, aliases


def goldens(path):
    version, spec, revision, arrays, aliases = read_arrays(path)
    out = {}
    for name, a in arrays.items():
        if a.ndim == 0 or name.endswith("_scale") or a.dtype == np.float32:
            continue
        entry = {"dtype": str(a.dtype), "shape": list(a.shape)}
        if a.dtype == np.int16:
            scale = arrays.get(name + "_scale", np.float32(1000.0))
            entry["scale"] = float(scale)
            deq = a.astype(np.float32) * (np.float32(1.0) / np.float32(scale))
            entry["stored_sum"] = int(a.astype(np.int64).sum())
        elif a.dtype == np.float16:
            deq = a.astype(np.float32)
            entry["stored_sum"] = float(a.astype(np.float64).sum())
        else:
            raise SystemExit(f"{path}: {name} is {a.dtype}, not float16 or int16")
        flat = deq.reshape(-1)
        entry["head"] = [float(x) for x in flat[:HEAD]]
        entry["sum"] = float(flat.astype(np.float64).sum())
        entry["abs_sum"] = float(np.abs(flat.astype(np.float64)).sum())
        out[name] = entry
    return {"binary_version": version, "spec": spec, "revision": revision, "aliases": aliases, "variables": out}


def main():
    out_path = sys.argv[1]
    models = {}
    for arg in sys.argv[2:]:
        name, rest = arg.split("=", 1)
        directory, _, argv = rest.partition(":")
        models[name] = {"argv": json.loads(argv) if argv else None, **goldens(f"{directory}/model.bin")}
    import importlib.metadata as md
    doc = {"made_by": "bash reference/ct2_convert.sh storage (reference/ct2_storage.py)",
           "ctranslate2": md.version("ctranslate2"), "models": models}
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
