"""The book's models: Chapter 3's MLP on the book's kernels (:mod:`.mlp`), Chapter 6's
encoder (:mod:`.encoder`), and Chapter 9's tiny decoder (:mod:`.decoder`), on the book's
kernels (:mod:`.kernel_decoder`) and with its CUDA graphs (:mod:`.graphs`).

Book section: *Chapter 3, "Backpropagation from the book's kernels"*, *Chapter 6, "A
12-layer encoder"* and *Chapter 9, "A tiny decoder, token for token"*. Every public name is
importable from :mod:`gpudl.models` itself.
"""

from gpudl.models.decoder import (
    CausalSelfAttention,
    DecoderBlock,
    DecoderConfig,
    TinyDecoder,
    check_prompt,
    generate_torch,
    make_decoder,
)
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
from gpudl.models.graphs import capture, stream_launch
from gpudl.models.kernel_decoder import KernelDecoder, launches_per_step, step_bytes_after
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
    "DecoderConfig",
    "CausalSelfAttention",
    "DecoderBlock",
    "TinyDecoder",
    "make_decoder",
    "check_prompt",
    "generate_torch",
    "KernelDecoder",
    "launches_per_step",
    "step_bytes_after",
    "capture",
    "stream_launch",
]
