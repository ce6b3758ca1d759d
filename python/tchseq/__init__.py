"""tchseq: fairseq Transformer models, run exactly as fairseq runs them, from Python.

    >>> import tchseq
    >>> t = tchseq.Translator("weights/multi30k.en-de")
    >>> t.translate(["Two dogs are playing in the snow."])
    ['Zwei Hunde spielen im Schnee.']
    >>> r = t.translate_batch(["Two dogs are playing in the snow."], beam_size=5, num_hypotheses=2)
    >>> r[0].texts[1], round(r[0].scores[0], 3)
    ('Zwei Hunde spielen in den Schnee.', -0.068)
    >>> t.score_batch(["A dog runs."], ["Ein Hund rennt."])[0].tokens
    ['Ein', 'Hund', 'rennt', '.', '</s>']

Calls release the GIL while they compute; a Translator may be shared by threads (its calls run
one at a time). Errors are ValueError with the library's one-line message.
"""

import warnings

# Loads libtorch (torch 2.13.0) into the process: the extension links against it by name.
# torch warns on import when NumPy is missing, which tchseq never uses.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    import torch  # noqa: F401

from ._native import LanguageModel, ScoringResult, TranslationResult, Translator, __version__

Scorer = Translator
"""`Scorer(model_dir).score_batch(sources, targets)`: the same object, named for scoring."""

__all__ = ["Translator", "Scorer", "LanguageModel", "TranslationResult", "ScoringResult", "__version__"]
