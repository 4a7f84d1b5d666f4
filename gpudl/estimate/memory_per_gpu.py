"""Memory per GPU: model state (parameters, gradients, optimizer state) under ZeRO and the other
parallel degrees, and the activations a transformer layer keeps for its backward pass.

Book section: *Chapter 7, "Memory: model state and activations"*; model state is first met in
*Chapter 4, "Mixed precision"* and sharded in *Chapter 6, "Sharding the model state: ZeRO"*,
fused attention's activations in *Chapter 8, "What fused
attention saves"*. Units: bytes, seconds, and bytes per second (not bits, not GB/s).
"""

from __future__ import annotations

from gpudl.checks import check_bool, check_choice, check_int, check_positive, check_real

__all__ = ["RECOMPUTE", "activation_memory", "model_state_memory"]


def model_state_memory(
    n_params: float,
    *,
    n_gpus: int = 1,
    zero_stage: int = 0,
    optimizer: str = "adam",
    precision: str = "mixed",
    tensor: int = 1,
    pipeline: int = 1,
    context: int = 1,
    expert: int = 1,
    expert_params: float = 0.0,
) -> float:
    """Bytes of model state (parameters, gradients, optimizer state) that each GPU holds.

    Book section: *Chapter 6, "Sharding the model state: ZeRO"*; the other degrees, *Chapter
    11, Five dimensions*. The accounting of ZeRO (Rajbhandari et al. 2020), in bytes per
    parameter::

        optimizer  precision  params  grads  optimizer state (K)
        adam       mixed      2       2      12  fp32 master copy, momentum, variance
        adam       fp32       4       4       8  momentum, variance (params are the master)
        sgd        mixed      2       2       8  fp32 master copy, momentum
        sgd        fp32       4       4       4  momentum

    (SGD means SGD with momentum.) Stage 0 is plain data parallelism: every GPU holds it all.
    ZeRO stage 1 divides the optimizer state among the ``n_gpus`` data-parallel GPUs, stage 2
    the gradients as well, stage 3 the parameters as well. Not counted: Adam's step counter,
    activations, temporary buffers and fragmentation.

    The other degrees (:class:`gpudl.parallel.degrees.ParallelDegrees`'s; all 1 by default):
    a GPU holds ``1 / (tensor x pipeline)`` of the dense parameters (a shard of every matrix of
    its stage's layers), and ZeRO shards that among the ``n_gpus x context`` GPUs that hold the
    same shard (a context-parallel GPU holds the same weights as its group). Of the
    ``n_params``, ``expert_params`` are in the experts of mixture-of-experts layers: spread
    over ``expert`` GPUs and split by the tensor degree too (Megatron-LM's default expert
    tensor parallelism), each GPU holds ``1 / (expert x tensor x pipeline)`` of them, and ZeRO
    shards those among the ``n_gpus x context / expert`` GPUs that hold the same experts.
    """
    check_positive("n_params", n_params)
    gpus = check_int("n_gpus", n_gpus, 1)
    if check_int("zero_stage", zero_stage, 0) > 3:
        raise ValueError(f"zero_stage must be from 0 to 3, got {zero_stage}")
    check_choice("optimizer", optimizer, ("adam", "sgd"))
    check_choice("precision", precision, ("mixed", "fp32"))
    model_ways = check_int("tensor", tensor, 1) * check_int("pipeline", pipeline, 1)
    replicas = gpus * check_int("context", context, 1)
    if replicas % check_int("expert", expert, 1):
        raise ValueError(f"the expert degree ({expert}) must divide n_gpus x context ({gpus} x "
                         f"{context}): the experts are spread over GPUs that hold the same "
                         "layers")
    if check_real("expert_params", expert_params, 0) > n_params:
        raise ValueError(f"expert_params ({expert_params:g}) must be at most n_params "
                         f"({n_params:g}): the experts' parameters are some of the model's")
    params, grads, state = {
        ("adam", "mixed"): (2, 2, 12), ("adam", "fp32"): (4, 4, 8),
        ("sgd", "mixed"): (2, 2, 8), ("sgd", "fp32"): (4, 4, 4),
    }[optimizer, precision]

    def per_gpu(count: float, split: int, sharers: int) -> float:
        ways = lambda stage: sharers if zero_stage >= stage else 1  # how many GPUs share it
        return count / split * (params / ways(3) + grads / ways(2) + state / ways(1))

    return (per_gpu(n_params - expert_params, model_ways, replicas)
            + per_gpu(expert_params, model_ways * expert, replicas // expert))


#: What :func:`activation_memory` can leave out and recompute in the backward pass.
RECOMPUTE = ("none", "selective", "full")


def activation_memory(
    seq_len: int, batch_size: int, hidden: int, n_heads: int, *, recompute: str = "none",
    fused_attention: bool = False, context_parallel: int = 1,
) -> float:
    """Bytes of activations one Transformer layer keeps for its backward pass, on each GPU.

    Book section: *Chapter 7, "Memory: model state and activations"* and *Chapter 8, "What fused
    attention saves"*. The accounting of Korthikanti et al. (2022) for a GPT-style layer
    (attention and a feed-forward block four times as wide, 16-bit activations, 1-byte dropout
    masks), with ``s = seq_len``, ``b = batch_size``, ``h = hidden`` and ``a = n_heads``,
    without tensor or sequence parallelism::

        recompute="none":       s b h (34 + 5 a s / h)
        recompute="selective":  34 s b h     (the a s^2 b score matrices are recomputed)
        recompute="full":       2 s b h      (only the layer's input is kept)

    ``34 s b h`` are the inputs of the layer's products, norms and activation functions and
    the dropout masks; ``5 a s^2 b`` the softmax output, its dropout mask and its dropped-out
    copy, which grow with the square of the sequence. With full recomputation the backward
    pass rebuilds one layer's activations at a time, so that layer's full amount is needed
    again, briefly, on top of the stored inputs of all layers.

    ``fused_attention=True`` is a fused kernel (FlashAttention, Chapter 8): it never stores
    the scores, and its backward pass recomputes them from Q, K and V (already counted in the
    ``34 s b h``) and one float32 log-sum-exp per row of scores, ``4 a s b`` bytes (a dropout
    mask is regenerated from the random generator's state, not stored). Without
    recomputation a layer then keeps ``s b h (34 + 4 a / h)``; selective and full
    recomputation keep what they kept.

    ``context_parallel = c`` splits the sequence over ``c`` GPUs (*Chapter 11*, long
    sequences): each keeps the activations of its own tokens, the inputs of its rows and, for
    the scores, its rows against every key, so every term above is per query row and a GPU
    keeps the whole sequence's amount times its share of the rows, ``ceil(s / c) / s`` (the
    GPU holding the most). Not counted: the two key/value chunks a ring holds in flight, which
    are not kept for the backward pass.
    """
    s = check_int("seq_len", seq_len, 1)
    b = check_int("batch_size", batch_size, 1)
    h = check_int("hidden", hidden, 1)
    a = check_int("n_heads", n_heads, 1)
    check_choice("recompute", recompute, RECOMPUTE)
    check_bool("fused_attention", fused_attention)
    c = check_int("context_parallel", context_parallel, 1)
    if c > s:
        raise ValueError(f"context_parallel ({c}) must be at most seq_len ({s}): each GPU "
                         "holds at least one token")
    if c > 1:  # each GPU keeps its rows: the whole sequence's activations times its share
        return activation_memory(s, b, h, a, recompute=recompute,
                                 fused_attention=fused_attention) * -(-s // c) / s
    if recompute == "full":
        return float(2 * s * b * h)
    if recompute == "selective":
        return float(34 * s * b * h)
    if fused_attention:
        return float(s * b * h * 34 + 4 * a * s * b)
    return float(s * b * h * 34 + 5 * a * s * s * b)
