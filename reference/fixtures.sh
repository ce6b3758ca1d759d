#!/usr/bin/env bash
# Ground-truth fixtures (tests/fixtures/models, tests/fixtures/wild) from fairseq 0.12.2.
# Called by reference/make_all.sh; run from anywhere. Steps:
#   data -> fairseq-preprocess -> fairseq-train (3 tiny models) -> fixtures.py -> wild.py
# --max-update values are multiples of 78 (updates per epoch) = checkpoint save points.
# Training is skipped when reference/work/ckpt/<name>/checkpoint_last.pt exists, unless
# FORCE_TRAIN=1 (or `rm -rf reference/work`). Everything is seeded and single-threaded.
# STEPS=train,fixtures,wild selects steps (default all).
set -euo pipefail
REF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$REF/.." && pwd)"
# shellcheck source=env.sh
source "$REF/env.sh"
cd "$ROOT"
WORK=reference/work
STEPS="${STEPS:-train,fixtures,wild}"
mkdir -p "$WORK"

has_step() { [[ ",$STEPS," == *",$1,"* ]]; }

if has_step train; then
    python reference/synth_task.py "$WORK/data"
    for kind in joined sep; do
        if [ ! -f "$WORK/bin-$kind/test.src-tgt.src.idx" ]; then
            extra=(); [ "$kind" = joined ] && extra=(--joined-dictionary)
            fairseq-preprocess -s src -t tgt --trainpref "$WORK/data/train" \
                --validpref "$WORK/data/valid" --testpref "$WORK/data/test" \
                --destdir "$WORK/bin-$kind" --workers 1 "${extra[@]}" > "$WORK/preprocess-$kind.log" 2>&1
        fi
    done
fi

COMMON=(--cpu --seed 1 --arch transformer --dropout 0.0 --optimizer adam --adam-betas '(0.9,0.98)'
        --lr 2e-3 --lr-scheduler inverse_sqrt --warmup-updates 400 --criterion cross_entropy
        --max-tokens 2048 --num-workers 0 --no-epoch-checkpoints
        --validate-interval 10 --save-interval 10 --log-format simple --log-interval 250
        --no-progress-bar)

train() {  # train NAME DATA ARGS...
    local name=$1 data=$2; shift 2
    local dir="$WORK/ckpt/$name"
    local argv=(fairseq-train "$WORK/$data" "${COMMON[@]}" --save-dir "$dir" "$@")
    if [ -f "$dir/checkpoint_last.pt" ] && [ "${FORCE_TRAIN:-0}" != 1 ]; then
        echo "train $name: exists, skipped"
        [ -f "$dir/train_info.json" ] || python reference/train_info.py "$dir" "${argv[@]}"
        return
    fi
    rm -rf "$dir"; mkdir -p "$dir"
    "${argv[@]}" > "$dir/train.log" 2>&1
    python reference/train_info.py "$dir" "${argv[@]}"
}

MODELS="${MODELS:-postnorm prenorm untied postnorm-untied}"
want() { [[ " $MODELS " == *" $1 "* ]]; }

if has_step train; then
    # (a) post-norm, sinusoidal, shared everything (joined dictionary), relu
    want postnorm && train postnorm bin-joined --max-update 1560 --share-all-embeddings \
        --encoder-embed-dim 32 --encoder-ffn-embed-dim 64 --encoder-layers 2 --encoder-attention-heads 4 \
        --decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --decoder-layers 2 --decoder-attention-heads 4
    # (b) pre-norm, learned positions (64 of them), gelu, layernorm_embedding, unscaled
    #     embeddings, separate dictionaries, tied decoder in/out, asymmetric FFN/heads
    want prenorm && train prenorm bin-sep --max-update 780 --encoder-normalize-before --decoder-normalize-before \
        --encoder-learned-pos --decoder-learned-pos --activation-fn gelu --layernorm-embedding \
        --no-scale-embedding --share-decoder-input-output-embed \
        --max-source-positions 64 --max-target-positions 64 \
        --encoder-embed-dim 32 --encoder-ffn-embed-dim 96 --encoder-layers 2 --encoder-attention-heads 4 \
        --decoder-embed-dim 32 --decoder-ffn-embed-dim 48 --decoder-layers 2 --decoder-attention-heads 2
    # (c) untied output projection, encoder 48 wide x 3 layers, decoder 32 wide x 1 layer,
    #     post-norm with fairseq's gelu (which does not take the encoder fast path)
    want untied && train untied bin-joined --max-update 780 --activation-fn gelu \
        --encoder-embed-dim 48 --encoder-ffn-embed-dim 96 --encoder-layers 3 --encoder-attention-heads 4 \
        --decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --decoder-layers 1 --decoder-attention-heads 4
    # (d) base of the 2018-layout fixture: post-norm, relu, nothing shared (separate dicts,
    #     untied output), equal encoder/decoder widths (a 2018 fused encoder_attn in_proj needs them)
    want postnorm-untied && train postnorm-untied bin-sep --max-update 780 \
        --encoder-embed-dim 32 --encoder-ffn-embed-dim 64 --encoder-layers 2 --encoder-attention-heads 4 \
        --decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --decoder-layers 2 --decoder-attention-heads 4
fi

if has_step fixtures; then
    python reference/fixtures.py ${FIXTURES:-}
fi

if has_step wild; then
    python reference/wild.py
fi
