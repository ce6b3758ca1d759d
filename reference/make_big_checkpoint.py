"""A ~1 GB fairseq checkpoint for bench/load.sh: transformer_vaswani_wmt_en_de_big built by fairseq
0.12.2 with random weights over a synthetic 40k joint dictionary, saved as fairseq-train saves
(zip, cfg). Usage: make_big_checkpoint.py OUT.pt"""
import sys

import torch
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models.transformer import TransformerModel
from fairseq.options import get_parser, add_model_args, get_training_parser, parse_args_and_arch


def main(out):
    torch.manual_seed(0)
    d = Dictionary()
    for i in range(40000 - 4):
        d.add_symbol(f"w{i}")
    parser = get_training_parser()
    args = parse_args_and_arch(parser, ["/dev/null", "--arch", "transformer_vaswani_wmt_en_de_big",
                                        "--share-all-embeddings", "--task", "translation"])

    class Task:
        source_dictionary = d
        target_dictionary = d

    model = TransformerModel.build_model(args, Task())
    cfg = convert_namespace_to_omegaconf(args)
    state = {"args": None, "cfg": cfg, "model": model.state_dict(), "optimizer_history": [],
             "extra_state": {}}
    torch.save(state, out)
    print(out, sum(p.numel() for p in model.parameters()), "parameters")


if __name__ == "__main__":
    main(sys.argv[1])
