"""``python -m gpudl estimate ...``: Chapter 7's calculators on the command line.

Book section: *Chapter 7, "A case study and choosing a GPU"* (the calculators' command line).

* ``estimate time``: training compute (``6ND``, plus attention if its sizes are given; for a
  mixture of experts, ``N`` the parameters a token uses), then time, GPU-hours, energy at the
  board power and, with ``--price``, cost on a GPU of :data:`gpudl.hardware.SPECS` at a given
  MFU.
* ``estimate mfu``: the MFU a run implies, from its tokens per second (or tokens and hours).
* ``estimate memory``: model state per GPU (ZeRO stages 0-3, split by the tensor, pipeline,
  context and expert degrees) plus activations, and which GPUs it fits on; with
  ``--inference``, the weights and the KV cache of serving (Chapter 9).
* ``estimate gpus``: the comparison table.

The parsing lives here; the arithmetic is the rest of :mod:`gpudl.estimate` and
:mod:`gpudl.hardware`.
"""

from __future__ import annotations

import argparse

from gpudl import estimate
from gpudl.checks import check_positive
from gpudl.hardware import PRECISIONS, SPECS, compare_gpus, peak_flops

__all__ = ["add_parser", "run"]

_GPU_HELP = "a GPU of gpudl.hardware.SPECS, one of: " + "; ".join(SPECS)


def _gpu_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", required=True, choices=list(SPECS), metavar="NAME",
                        help=_GPU_HELP)
    parser.add_argument("--gpus", type=int, default=1, help="number of GPUs (default 1)")
    parser.add_argument("--dtype", choices=list(PRECISIONS), default="bf16",
                        help="whose datasheet peak to use: fp32, fp16 (tensor cores) or bf16 "
                             "(default)")


def _experts_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--expert-params", type=float, default=0.0,
                        help="of --params, those in the experts of mixture-of-experts layers "
                             "(default 0: a dense model)")


def _model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=float, required=True, help="parameters, e.g. 1e9")
    _experts_option(parser)
    parser.add_argument("--experts", type=int, help="experts per layer (with --expert-params "
                                                    "and --top-k: 6 N D counts the active N)")
    parser.add_argument("--top-k", type=int, help="experts each token uses")
    for flag, meaning in (("--layers", "layers"), ("--heads", "attention heads"),
                          ("--head-dim", "head size"), ("--seq-len", "sequence length")):
        parser.add_argument(flag, type=int, help=f"{meaning} (give all four to add the "
                                                 "attention flops)")


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``estimate`` command and its four sub-commands to ``python -m gpudl``."""
    parser = commands.add_parser(
        "estimate", help="training time, MFU, memory, GPU table",
        description="Chapter 7's calculators: training time, cost and energy; MFU; memory per "
                    "GPU; the GPU table.")
    sub = parser.add_subparsers(dest="calculator", required=True)

    p_time = sub.add_parser("time", help="compute, time, energy and cost of a training run")
    _model_options(p_time)
    p_time.add_argument("--tokens", type=float, required=True, help="training tokens")
    _gpu_options(p_time)
    p_time.add_argument("--mfu", type=float, required=True,
                        help="model flops utilisation, in (0, 1], e.g. 0.4")
    p_time.add_argument("--price", type=float,
                        help="price per GPU-hour, in any currency (your provider's)")

    p_mfu = sub.add_parser("mfu", help="the MFU a run's throughput implies")
    _model_options(p_mfu)
    p_mfu.add_argument("--tokens-per-second", type=float, help="measured throughput")
    p_mfu.add_argument("--tokens", type=float, help="tokens of the whole run (with --hours)")
    p_mfu.add_argument("--hours", type=float, help="duration of the whole run (with --tokens)")
    _gpu_options(p_mfu)

    p_mem = sub.add_parser("memory", help="memory per GPU, and the GPUs it fits on")
    p_mem.add_argument("--params", type=float, required=True, help="parameters, e.g. 1e9")
    p_mem.add_argument("--gpus", type=int, default=1, help="data-parallel GPUs (default 1)")
    for flag, meaning in (("--tensor", "tensor-parallel degree"),
                          ("--pipeline", "pipeline-parallel degree (stages)"),
                          ("--context", "context-parallel degree"),
                          ("--expert", "expert-parallel degree, dividing --gpus x --context")):
        p_mem.add_argument(flag, type=int, default=1, help=f"{meaning} (default 1)")
    _experts_option(p_mem)
    p_mem.add_argument("--zero-stage", type=int, default=0, choices=range(4),
                       help="ZeRO stage 0-3 (default 0: nothing sharded)")
    p_mem.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p_mem.add_argument("--precision", choices=["mixed", "fp32"], default="mixed")
    for flag, meaning in (("--seq-len", "sequence length"), ("--batch", "micro-batch size"),
                          ("--hidden", "hidden size"), ("--heads", "attention heads"),
                          ("--layers", "layers")):
        p_mem.add_argument(flag, type=int,
                           help=f"{meaning} (give all five to add activations)")
    p_mem.add_argument("--recompute", choices=list(estimate.RECOMPUTE), default="none")
    p_mem.add_argument("--inference", action="store_true",
                       help="serving instead of training: the weights and the KV cache of "
                            "--batch sequences of --seq-len tokens (needs --layers, "
                            "--kv-heads and --head-dim)")
    p_mem.add_argument("--kv-heads", type=int, help="key and value heads (--inference)")
    p_mem.add_argument("--head-dim", type=int, help="head size (--inference)")
    p_mem.add_argument("--weight-bytes", type=float, default=2,
                       help="bytes per weight (--inference; default 2, bf16; 1 for int8)")
    p_mem.add_argument("--kv-bytes", type=float, default=2,
                       help="bytes per cached value (--inference; default 2, fp16)")

    p_gpus = sub.add_parser("gpus", help="the GPUs of gpudl.hardware.SPECS side by side")
    p_gpus.add_argument("--gb-per-gpu", type=float,
                        help="memory a GPU must hold, in GB, to mark the GPUs it fits")
    for calculator in (p_time, p_mfu, p_mem, p_gpus):
        calculator.set_defaults(estimate_parser=calculator)


def _flops_per_token(args: argparse.Namespace) -> float:
    params = args.params
    moe = {"--expert-params": args.expert_params or None, "--experts": args.experts,
           "--top-k": args.top_k}
    if any(v is not None for v in moe.values()):
        missing = [flag for flag, value in moe.items() if value is None]
        if missing:
            raise ValueError(f"a mixture of experts needs --expert-params, --experts and "
                             f"--top-k: missing {', '.join(missing)}")
        params = estimate.active_parameters(args.params, args.expert_params, args.experts,
                                            args.top_k)
        print(f"active parameters: {params:.4g} of {args.params:.4g} ({args.top_k} of "
              f"{args.experts} experts per token)")
    return estimate.training_flops(params, 1, n_layers=args.layers, n_heads=args.heads,
                                   head_dim=args.head_dim, seq_len=args.seq_len)


def _time(args: argparse.Namespace) -> None:
    flops = _flops_per_token(args) * args.tokens
    peak = peak_flops(args.gpu, args.dtype)
    seconds = estimate.training_time(flops, args.gpus, peak, args.mfu)
    joules = estimate.training_energy(seconds, args.gpus, SPECS[args.gpu].tdp_watts)
    print(f"training compute: {flops:.4g} flop")
    print(f"{args.gpus} x {args.gpu} at {peak / 1e12:g} TFLOP/s ({args.dtype}) and MFU "
          f"{args.mfu:.1%}: {seconds / 3600:.4g} h ({seconds / 86400:.3g} days), "
          f"{seconds / 3600 * args.gpus:.4g} GPU-hours")
    print(f"energy at {SPECS[args.gpu].tdp_watts:g} W per GPU (board power, GPUs only): "
          f"{joules / 3.6e6:.4g} kWh ({joules:.4g} J)")
    if args.price is not None:
        cost = estimate.training_cost(seconds, args.gpus, args.price)
        print(f"cost at {args.price:g} per GPU-hour: {cost:.4g}")


def _mfu(args: argparse.Namespace) -> None:
    if args.tokens_per_second is not None:
        if args.tokens is not None or args.hours is not None:
            raise ValueError("give either --tokens-per-second or --tokens and --hours, not both")
        rate = args.tokens_per_second
    elif args.tokens is not None and args.hours is not None:
        for name, value in (("--tokens", args.tokens), ("--hours", args.hours)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        rate = args.tokens / (args.hours * 3600)
    else:
        raise ValueError("give --tokens-per-second, or --tokens and --hours")
    per_token = _flops_per_token(args)
    peak = peak_flops(args.gpu, args.dtype)
    value = estimate.mfu(rate, per_token, args.gpus, peak)
    print(f"model flops per token: {per_token:.4g}; throughput {rate:.4g} tokens/s")
    print(f"{args.gpus} x {args.gpu} at {peak / 1e12:g} TFLOP/s ({args.dtype}): MFU {value:.1%}")
    if value > 1:
        print("above 100%: more than the GPUs' peak, so the inputs cannot all be true")


def _inference_memory(args: argparse.Namespace) -> float:
    needed = {"--layers": args.layers, "--kv-heads": args.kv_heads,
              "--head-dim": args.head_dim, "--seq-len": args.seq_len, "--batch": args.batch}
    missing = [flag for flag, value in needed.items() if value is None]
    if missing:
        raise ValueError(f"--inference needs {', '.join(missing)}")
    weights = check_positive("--params", args.params) * check_positive(
        "--weight-bytes", args.weight_bytes)
    per_token = estimate.kv_cache_bytes(args.layers, args.kv_heads, args.head_dim, 1,
                                        args.kv_bytes)
    tokens = args.batch * args.seq_len
    cache = estimate.kv_cache_bytes(args.layers, args.kv_heads, args.head_dim, tokens,
                                    args.kv_bytes)
    print(f"weights: {args.params:.4g} parameters x {args.weight_bytes:g} B = "
          f"{weights / 1e9:.4g} GB")
    print(f"KV cache per token: 2 x {args.layers} layers x {args.kv_heads} KV heads x "
          f"{args.head_dim} x {args.kv_bytes:g} B = {per_token:,.0f} B "
          f"({per_token / 2**10:,.4g} KiB, {per_token / 2**20:.4g} MiB)")
    print(f"KV cache: {args.batch} sequence{'s' if args.batch != 1 else ''} x "
          f"{args.seq_len:,} tokens = {cache / 1e9:.4g} GB ({cache / 2**30:.4g} GiB)")
    return weights + cache


def _memory(args: argparse.Namespace) -> None:
    if args.inference:
        total = _inference_memory(args)
        print(f"total per GPU: {total / 1e9:.4g} GB")
        _fits(total)
        return
    state = estimate.model_state_memory(
        args.params, n_gpus=args.gpus, zero_stage=args.zero_stage, optimizer=args.optimizer,
        precision=args.precision, tensor=args.tensor, pipeline=args.pipeline,
        context=args.context, expert=args.expert, expert_params=args.expert_params)
    print(f"model state per GPU: {state / 1e9:.4g} GB ({args.optimizer}, {args.precision} "
          f"precision, ZeRO stage {args.zero_stage}, {args.gpus} data-parallel GPU"
          f"{'s' if args.gpus != 1 else ''})")
    degrees = {"tensor": args.tensor, "pipeline": args.pipeline, "context": args.context}
    if any(d != 1 for d in degrees.values()) or args.expert != 1:
        world = args.gpus * args.tensor * args.pipeline * args.context
        experts = f", the experts spread {args.expert} ways" if args.expert != 1 else ""
        print(f"parallel degrees: data {args.gpus} x " + " x ".join(
            f"{name} {d}" for name, d in degrees.items()) + f" = {world:,} GPUs{experts}")
    sizes = (args.seq_len, args.batch, args.hidden, args.heads, args.layers)
    total = state
    if any(v is not None for v in sizes):
        if None in sizes:
            raise ValueError("activations need all of --seq-len, --batch, --hidden, --heads "
                             "and --layers")
        if args.layers < 1:
            raise ValueError(f"--layers must be >= 1, got {args.layers}")
        per_layer = estimate.activation_memory(args.seq_len, args.batch, args.hidden,
                                               args.heads, recompute=args.recompute)
        total += per_layer * args.layers
        print(f"activations: {args.layers} layers x {per_layer / 1e9:.4g} GB = "
              f"{per_layer * args.layers / 1e9:.4g} GB (recompute {args.recompute})")
    print(f"total per GPU: {total / 1e9:.4g} GB")
    _fits(total)


def _fits(total: float) -> None:
    rows = compare_gpus(total)
    print("fits on:", ", ".join(r["name"] for r in rows if r["fits"]) or "none")
    print("not on:", ", ".join(r["name"] for r in rows if not r["fits"]) or "none")


def _gpus(args: argparse.Namespace) -> None:
    need = None if args.gb_per_gpu is None else args.gb_per_gpu * 1e9
    print(f"{'GPU':<16}{'memory GB':>10}{'GB/s':>8}{'FP32 TF/s':>11}{'train TF/s':>12}"
          f"{'TDP W':>7}{'TFLOP/J':>9}" + ("  fits" if need is not None else ""))
    for r in compare_gpus(need):
        fits = "" if need is None else f"  {'yes' if r['fits'] else 'no'}"
        print(f"{r['name']:<16}{r['memory_gb']:>10g}{r['bandwidth_gbs']:>8g}"
              f"{r['fp32_tflops']:>11g}{r['training_tflops']:>12g}{r['tdp_watts']:>7g}"
              f"{r['tflop_per_joule']:>9.3f}{fits}")


def run(args: argparse.Namespace) -> None:
    """Run the calculator ``args`` names; bad values exit with argparse's usage error."""
    calculators = {"time": _time, "mfu": _mfu, "memory": _memory, "gpus": _gpus}
    try:
        calculators[args.calculator](args)
    except (TypeError, ValueError) as err:
        args.estimate_parser.error(str(err))
