"""The verify reference format, computed by fairseq itself: which encoder path fairseq takes
(`instrument`, `CALLS`), its forward pass over one batch (`forward`), and the tensors a
verify_*.pt file holds (`tensors`). Shared by goldens.py, multilingual_tensors.py and
fastpath_golden.py."""
import torch

CALLS = {"transformer_encoder_layer_fwd": 0, "nested_tensor_from_mask": 0}


def instrument():
    """Counts calls of torch's encoder fast path (BetterTransformer) and of its nested-tensor
    variant into CALLS."""
    orig_fwd, orig_nt = torch._transformer_encoder_layer_fwd, torch._nested_tensor_from_mask

    def fwd(*a, **k):
        CALLS["transformer_encoder_layer_fwd"] += 1
        return orig_fwd(*a, **k)

    def nt(*a, **k):
        CALLS["nested_tensor_from_mask"] += 1
        return orig_nt(*a, **k)

    torch._transformer_encoder_layer_fwd = fwd
    torch._nested_tensor_from_mask = nt


def forward(model, src_tokens, src_lengths, prev_output_tokens):
    """model.encoder, model.decoder (return_all_hiddens) and get_normalized_probs under no_grad,
    as fairseq runs them: (enc, dec, lprobs, fast, nested), `fast`/`nested` the encoder path."""
    for k in CALLS:
        CALLS[k] = 0
    with torch.no_grad():
        enc = model.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=True)
        fast = CALLS["transformer_encoder_layer_fwd"] > 0
        nested = CALLS["nested_tensor_from_mask"] > 0
        dec = model.decoder(prev_output_tokens, encoder_out=enc, src_lengths=src_lengths, return_all_hiddens=True)
        lprobs = model.get_normalized_probs(dec, log_probs=True)
    return enc, dec, lprobs, fast, nested


def tensors(src_tokens, src_lengths, prev_output_tokens, enc, dec, lprobs, fast, as_returned=False):
    """The verify format's tensors. The fast path keeps layer outputs batch-first ([B,S,C],
    nested when the mask is left-aligned); the format is [S,B,C] (nested: padded with 0.0),
    unless `as_returned` (the fast-path goldens keep fairseq's own layouts, nested included)."""
    out = {
        "src_tokens": src_tokens,
        "src_lengths": src_lengths,
        "prev_output_tokens": prev_output_tokens,
        "encoder_out": enc["encoder_out"][0],
        "encoder_padding_mask": enc["encoder_padding_mask"][0],
        "encoder_embedding": enc["encoder_embedding"][0],
    }
    for i, st in enumerate(enc["encoder_states"]):
        if not as_returned and st.is_nested:
            st = st.to_padded_tensor(0.0, (src_tokens.size(0), src_tokens.size(1), st.size(-1)))
        if not as_returned and i > 0 and fast:
            st = st.transpose(0, 1)
        out[f"encoder_states.{i}"] = st
    for i, st in enumerate(dec[1]["inner_states"]):
        out[f"decoder_inner_states.{i}"] = st
    out["attn"] = dec[1]["attn"][0]
    out["logits"] = dec[0]
    out["lprobs"] = lprobs
    return out if as_returned else {k: v.detach().contiguous().clone() for k, v in out.items()}
