"""Copy a fairseq checkpoint without `last_optimizer_state` (the Adam moments, 2/3 of its size).

Usage: python strip_checkpoint.py IN.pt OUT.pt
The result is still a normal fairseq checkpoint (fairseq-generate/-interactive load it).
"""
import sys

import torch


def main():
    src, dst = sys.argv[1], sys.argv[2]
    state = torch.load(src, map_location="cpu", weights_only=False)
    state.pop("last_optimizer_state", None)
    torch.save(state, dst)


if __name__ == "__main__":
    main()
