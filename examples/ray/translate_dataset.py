"""Translate a CSV dataset with Ray Data and tchseq: one Translator per actor, batches of rows.

    python examples/ray/translate_dataset.py input.csv weights/multi30k.en-de output.csv

`input.csv` has a `source` column; the output adds `translation`. Each actor translates as
`tchseq translate --batch-size 1` does (one sentence per batch, fairseq-interactive's default),
so the output equals the CLI's line for line.
"""

import sys

import ray

import tchseq


class TchseqTranslate:
    """A Ray Data callable class: loads the model once per actor."""

    def __init__(self, model_dir, threads=1):
        self.translator = tchseq.Translator(model_dir, threads=threads)

    def __call__(self, batch):
        batch["translation"] = self.translator.translate([str(s) for s in batch["source"]], batch_size=1)
        return batch


def translate_csv(input_csv, model_dir, concurrency=2, batch_size=16):
    ds = ray.data.read_csv(input_csv)
    return ds.map_batches(
        TchseqTranslate,
        fn_constructor_args=(str(model_dir),),
        concurrency=concurrency,
        batch_size=batch_size,
        batch_format="pandas",
    )


if __name__ == "__main__":
    input_csv, model_dir, output_csv = sys.argv[1:4]
    ray.init(num_cpus=4)  # logical: two actors plus the read tasks
    translate_csv(input_csv, model_dir).to_pandas().to_csv(output_csv, index=False)
