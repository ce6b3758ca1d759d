from os import PathLike
from typing import List, Optional, Sequence, Tuple, Union

__version__: str

class TranslationResult:
    """One sentence's hypotheses, best first."""
    hypotheses: List[List[str]]
    """Each hypothesis as subword tokens."""
    texts: List[str]
    """Each hypothesis detokenized."""
    scores: List[float]
    """Natural-log scores, length-normalized as fairseq does."""
    token_scores: List[List[float]]
    """Per-token log-probabilities, EOS included."""
    alignments: Optional[List[List[Tuple[int, int]]]]
    """(source word, target word) pairs, with return_alignment=True."""

class ScoringResult:
    tokens: List[str]
    """Target tokens, EOS included."""
    log_probs: List[float]
    logprob: float
    avg_logprob: float

class Translator:
    """A fairseq Transformer model, loaded once. ``compute_type`` is ``"exact"`` (fairseq's
    arithmetic, bit for bit), ``"float32"`` (the decoder's attention ops fused: faster, scores
    move in the last digits) or ``"int8"`` (the linear layers dynamically quantized as well:
    faster still, scores and some hypotheses differ; see docs/translate.md).

    >>> t = Translator("weights/multi30k.en-de", threads=2)
    >>> t.translate(["A dog runs."])
    ['Ein Hund rennt.']
    """
    def __init__(
        self,
        model_dir: Union[str, PathLike],
        device: str = "cpu",
        compute_type: str = "exact",
        threads: int = 0,
        inter_threads: int = 1,
        tokenized: bool = False,
        source_lang: Optional[str] = None,
        target_lang: Optional[str] = None,
    ) -> None:
        """A multilingual model loaded without source_lang/target_lang serves every pair it
        knows on one copy of its weights; each call then names its pair."""
    def translate(
        self,
        sentences: Sequence[str],
        source_lang: Union[str, Sequence[str], None] = None,
        target_lang: Union[str, Sequence[str], None] = None,
        **options,
    ) -> List[str]:
        """Raw text in, the best translation of each sentence out (tchseq translate --format text)."""
    def translate_batch(
        self,
        source: Sequence[Union[str, Sequence[str]]],
        target_prefix: Optional[Sequence[Union[str, Sequence[str], None]]] = None,
        constraints: Optional[Sequence[Optional[Sequence[str]]]] = None,
        source_lang: Union[str, Sequence[str], None] = None,
        target_lang: Union[str, Sequence[str], None] = None,
        **options,
    ) -> List[TranslationResult]:
        """Options: beam_size, num_hypotheses, length_penalty, unk_penalty, max_len_a, max_len_b, min_len,
        no_repeat_ngram_size, sampling, sampling_topk, sampling_topp, sampling_temperature, seed,
        diverse_beam_groups, diverse_beam_strength, diversity_rate, match_source_len,
        return_alignment, batch_size, max_tokens (fairseq's names beam, nbest, lenpen, ... work too).
        Without batch_size or max_tokens, batches of up to 512 tokens, as the CLI batches a file
        (batch_size=1: fairseq-interactive's one sentence at a time).
        target_prefix: per sentence, target text (or subword tokens, or None) that its hypotheses
        begin with (fairseq's prefix_tokens).
        constraints: per sentence, texts (or None) that its hypotheses must contain (fairseq's
        --constraints); constraint_order="unordered" allows any order ("ordered" by default).
        source_lang, target_lang: a multilingual model's pair, for every sentence or one each
        (sentences of different pairs share batches)."""
    def score_batch(
        self,
        source: Sequence[str],
        target: Sequence[str],
        max_tokens: int = 4096,
        source_lang: Union[str, Sequence[str], None] = None,
        target_lang: Union[str, Sequence[str], None] = None,
    ) -> List[ScoringResult]:
        """(source, target) pairs scored as fairseq-generate --score-reference does."""
    @property
    def report(self) -> str:
        """The load report as JSON text."""

Scorer = Translator

class LanguageModel:
    """A fairseq transformer_lm, loaded once (tchseq score --lm and translate with an LM)."""
    def __init__(self, model_dir: Union[str, PathLike], device: str = "cpu", threads: int = 0) -> None: ...
    def score_batch(self, texts: Sequence[str], batch_size: int = 16) -> List[ScoringResult]:
        """Each text as one sample (score --lm --sample-break-mode eos): tokens, EOS included, and
        their natural-log probabilities, fairseq-eval-lm's numbers."""
    def generate(self, prompts: Sequence[str], **options) -> List[TranslationResult]:
        """Continues each prompt; keywords as Translator.translate_batch takes them."""
