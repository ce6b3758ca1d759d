"""Merges a golden script's recorded runs into its manifest: the goldens of ROWS (one JSON object
per line, as the scripts' record() writes them) replace those of the same name in MANIFEST; the
sections named by --keep stay as they were. Shared by family_goldens.sh and lm_goldens.sh.

Usage: python -I write_manifest.py ROWS MANIFEST --made-by TEXT --kinds JSON --fields a,b,... --keep x,y
"""
import argparse
import json


def main():
    p = argparse.ArgumentParser()
    p.add_argument("rows")
    p.add_argument("manifest")
    p.add_argument("--made-by", required=True)
    p.add_argument("--kinds", required=True, help="a JSON object: what each kind of golden holds")
    p.add_argument("--fields", required=True, help="the fields of a row a golden keeps")
    p.add_argument("--keep", default="", help="the manifest's other sections, kept as they are")
    a = p.parse_args()
    rows = [json.loads(line) for line in open(a.rows)]
    old = {}
    try:
        old = json.load(open(a.manifest))
    except FileNotFoundError:
        pass
    fields = a.fields.split(",")
    goldens = {r["golden"]: {k: r[k] for k in fields} for r in rows}
    out = {"made_by": a.made_by, "kinds": json.loads(a.kinds), "goldens": {**old.get("goldens", {}), **goldens}}
    for section in filter(None, a.keep.split(",")):
        out[section] = old.get(section, {})
    json.dump(out, open(a.manifest, "w"), indent=1)


if __name__ == "__main__":
    main()
