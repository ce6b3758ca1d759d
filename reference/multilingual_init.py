#!/usr/bin/env python3
"""Random-init checkpoint for a fairseq-train command line: the model exactly as fairseq-train
builds it before the first update.

Usage: python reference/multilingual_init.py OUT.pt FAIRSEQ-TRAIN-ARGS...

Runs fairseq_cli.train.cli_main with the given arguments (so cfg, task setup, seeding
`np.random.seed(seed); utils.set_torch_seed(seed)` and `task.build_model` are fairseq's own), but
wraps fairseq.checkpoint_utils.load_checkpoint (called once, after the model and trainer are
built and before any training step): it lets it run (no checkpoint exists in --save-dir, so
nothing is loaded), then writes the trainer's checkpoint to OUT.pt with Trainer.save_checkpoint
(the same format fairseq-train's checkpoints have; extra_state gets val_loss None, no
train_iterator: the epoch iterator has not started) and exits. Strip the optimizer state afterwards (reference/multi30k/strip_checkpoint.py).
"""
import sys

from fairseq import checkpoint_utils
from fairseq_cli import train


def main():
    out = sys.argv[1]
    sys.argv = ["fairseq-train"] + sys.argv[2:]
    orig = checkpoint_utils.load_checkpoint

    def load_then_save(cfg, trainer, **kwargs):
        extra_state, epoch_itr = orig(cfg, trainer, **kwargs)
        assert extra_state is None, "--save-dir already holds a checkpoint"
        assert trainer.get_num_updates() == 0
        trainer.consolidate_optimizer()  # as checkpoint_utils.save_checkpoint does first
        trainer.save_checkpoint(out, {"val_loss": None})
        print(f"saved the initial model to {out}", file=sys.stderr)
        raise SystemExit(0)

    checkpoint_utils.load_checkpoint = load_then_save
    train.cli_main()


if __name__ == "__main__":
    main()
