"""A transformer-base-size fairseq checkpoint with random weights, made with PyTorch alone (the GPU
machines have no fairseq): fairseq's `transformer` arch (d512, 8 heads, FFN 2048, 6+6 layers, post-norm,
sinusoidal positions, shared embeddings) over a synthetic joint dictionary, in fairseq's key layout and
initialization, saved as an args-era checkpoint (an argparse.Namespace under `args`, as fairseq
before 0.10 saved). Also writes dict.{src,tgt}.txt and an input of tokenized sentences.

Usage: python make_base_model.py OUT_DIR [--vocab 32000] [--lines 512] [--seed 0]
"""
import argparse
import math
import os
import random

import torch


def base_args(vocab, args):
    # fairseq's base_architecture defaults for `transformer`, as fairseq-train records them
    d, ffn, heads, layers = args.dim, args.ffn, args.heads, args.layers
    return argparse.Namespace(
        _name="transformer", arch="transformer", task="translation", source_lang="src", target_lang="tgt",
        encoder_embed_dim=d, encoder_ffn_embed_dim=ffn, encoder_attention_heads=heads, encoder_layers=layers,
        decoder_embed_dim=d, decoder_ffn_embed_dim=ffn, decoder_attention_heads=heads, decoder_layers=layers,
        decoder_output_dim=d, decoder_input_dim=d,
        encoder_normalize_before=False, decoder_normalize_before=False,
        encoder_learned_pos=False, decoder_learned_pos=False,
        share_all_embeddings=True, share_decoder_input_output_embed=True,
        no_token_positional_embeddings=False, no_scale_embedding=False, layernorm_embedding=False,
        adaptive_input=False, adaptive_softmax_cutoff=None, cross_self_attention=False,
        activation_fn="relu", dropout=0.1, attention_dropout=0.0, activation_dropout=0.0,
        max_source_positions=1024, max_target_positions=1024, left_pad_source=True, left_pad_target=False,
        encoder_layerdrop=0, decoder_layerdrop=0, quant_noise_pq=0, tie_adaptive_weights=False,
        no_cross_attention=False, fp16=False, seed=1,
    )


def linear(sd, prefix, out_f, in_f, gain=1.0):
    w = torch.empty(out_f, in_f)
    torch.nn.init.xavier_uniform_(w, gain=gain)
    sd[f"{prefix}.weight"] = w
    sd[f"{prefix}.bias"] = torch.zeros(out_f)


def layer_norm(sd, prefix, d):
    sd[f"{prefix}.weight"] = torch.ones(d)
    sd[f"{prefix}.bias"] = torch.zeros(d)


def attention(sd, prefix, d):
    # fairseq's MultiheadAttention.reset_parameters: q/k/v xavier with gain 1/sqrt(2)
    for name in ("k_proj", "v_proj", "q_proj"):
        linear(sd, f"{prefix}.{name}", d, d, gain=1 / math.sqrt(2))
    linear(sd, f"{prefix}.out_proj", d, d)


def layer(sd, p, d, ffn, attentions):
    for name in attentions:
        attention(sd, f"{p}.{name}", d)
        layer_norm(sd, f"{p}.{name}_layer_norm", d)
    linear(sd, f"{p}.fc1", ffn, d)
    linear(sd, f"{p}.fc2", d, ffn)
    layer_norm(sd, f"{p}.final_layer_norm", d)


def state_dict(vocab, a):
    d, ffn = a.encoder_embed_dim, a.encoder_ffn_embed_dim
    sd = {}
    embed = torch.randn(vocab, d) * d ** -0.5
    embed[1].zero_()  # padding_idx
    sd["encoder.version"] = torch.tensor([3.0])
    sd["encoder.embed_tokens.weight"] = embed
    sd["encoder.embed_positions._float_tensor"] = torch.tensor([1.0])
    for i in range(a.encoder_layers):
        layer(sd, f"encoder.layers.{i}", d, ffn, ["self_attn"])
    sd["decoder.embed_tokens.weight"] = embed
    sd["decoder.embed_positions._float_tensor"] = torch.tensor([1.0])
    for i in range(a.decoder_layers):
        layer(sd, f"decoder.layers.{i}", d, ffn, ["self_attn", "encoder_attn"])
    sd["decoder.version"] = torch.tensor([3.0])
    return sd


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--lines", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=6)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    words = [f"w{i}" for i in range(args.vocab - 4)]  # + <s> <pad> </s> <unk>
    for side in ("src", "tgt"):
        with open(os.path.join(args.out, f"dict.{side}.txt"), "w") as f:
            f.writelines(f"{w} {args.vocab - i}\n" for i, w in enumerate(words))
    a = base_args(args.vocab, args)
    sd = state_dict(args.vocab, a)
    torch.save({"args": a, "model": sd, "optimizer_history": [], "extra_state": {}}, os.path.join(args.out, "model.pt"))
    rng = random.Random(args.seed)
    with open(os.path.join(args.out, "input.src"), "w") as f:
        for _ in range(args.lines):
            f.write(" ".join(rng.choice(words[:8000]) for _ in range(rng.randint(12, 30))) + "\n")
    params = sum(t.numel() for k, t in sd.items() if k != "decoder.embed_tokens.weight")
    print(f"{args.out}/model.pt: {params / 1e6:.1f}M parameters, vocabulary {args.vocab}")


if __name__ == "__main__":
    main()
