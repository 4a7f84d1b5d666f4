"""The book's models: Chapter 3's MLP on the book's kernels (:mod:`.mlp`) and Chapter 6's
encoder (:mod:`.encoder`).

Book section: *Chapter 3, "Backpropagation from the book's kernels"* and *Chapter 6, "A
12-layer encoder"*. Every public name is importable from :mod:`gpudl.models` itself.
"""

from gpudl.models.encoder import (
    BERT_BASE,
    EncoderBlock,
    EncoderConfig,
    FeedForward,
    SelfAttention,
    attend,
    encoder_batch,
    make_encoder,
)
from gpudl.models.mlp import (
    FlopCounter,
    KernelMLP,
    TorchTwin,
    accuracy,
    batches,
    load_digits_split,
    train,
)

__all__ = [
    "FlopCounter",
    "KernelMLP",
    "TorchTwin",
    "load_digits_split",
    "batches",
    "accuracy",
    "train",
    "BERT_BASE",
    "EncoderConfig",
    "SelfAttention",
    "FeedForward",
    "EncoderBlock",
    "make_encoder",
    "attend",
    "encoder_batch",
]
