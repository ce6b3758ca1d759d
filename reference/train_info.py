#!/usr/bin/env python3
"""train_info.py CKPT_DIR ARGV...: writes CKPT_DIR/train_info.json: the fairseq-train argv and
the train/valid stats and wall-clock seconds fairseq-train logged for the epoch whose end
produced checkpoint_last.pt."""
import json
import re
import sys

import torch

d, argv = sys.argv[1], sys.argv[2:]
st = torch.load(f"{d}/checkpoint_last.pt", map_location="cpu", weights_only=False)
updates = st["optimizer_history"][-1]["num_updates"]
lines = open(f"{d}/train.log").read().splitlines()
train = [l for l in lines if "| train | epoch" in l and re.search(rf"\| num_updates {updates}( \||$)", l)][-1]
valid = [l for l in lines if "valid on 'valid' subset" in l and re.search(rf"\| num_updates {updates}( \||$)", l)][-1]
secs = float(re.search(r"\| wall (\d+)", train).group(1))
json.dump({"seconds": secs, "num_updates": updates, "argv": argv,
           "final_train_stats": train.split("| train | ")[1],
           "final_valid_stats": valid.split("| valid | ")[1]},
          open(f"{d}/train_info.json", "w"), indent=1)
print(f"train {d}: {updates} updates, {secs:.0f}s")
