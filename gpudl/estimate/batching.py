"""Static against continuous batching, simulated on a seeded stream of requests with the
roofline's cost of each step.

Book section: *Chapter 9, "Static and continuous batching"* (and the paged cache's waste,
*"A paged KV cache"*, which replays the same stream).

:func:`request_stream` draws requests (arrival times of a Poisson process, prompt and output
lengths uniform in their ranges) from a seed. :func:`simulate` serves them on one GPU whose
steps cost what :class:`StepCost` says (the roofline of :mod:`gpudl.estimate.inference`):

* ``"static"``: when the GPU is idle it takes up to ``max_batch`` waiting requests, prefills
  their prompts and decodes until the longest is done; the slots of the requests that finish
  first compute padding, and a request that arrives meanwhile waits for the whole batch;
* ``"continuous"`` (iteration-level scheduling, Orca, Yu et al. 2022): before every step the
  free slots take waiting requests, whose prompts are prefilled in that step, and a request
  leaves as soon as its last token is made.

A prefill makes a request's first output token; every decode step one more per running
request. Time is the model's, not a measurement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpudl.checks import (
    check_choice,
    check_instance,
    check_int,
    check_ints,
    check_positive,
    check_real,
)
from gpudl.estimate.inference import decode_step_time, prefill_time

__all__ = ["Request", "StepCost", "Served", "request_stream", "simulate", "check_requests",
           "POLICIES"]

#: The batching policies :func:`simulate` knows.
POLICIES = ("static", "continuous")


@dataclass(frozen=True)
class Request:
    """One request: when it arrives (seconds), its prompt's tokens and the tokens it asks
    for (at least 1)."""

    arrival_s: float
    prompt: int
    output: int

    def __post_init__(self) -> None:
        check_real("arrival_s", self.arrival_s, 0)
        check_int("prompt", self.prompt, 1)
        check_int("output", self.output, 1)


def check_requests(requests: object, ordered: bool = True) -> list[Request]:
    """``requests`` as a list after checking it: a non-empty sequence of :class:`Request`
    (``TypeError`` otherwise), sorted by arrival if ``ordered`` (``ValueError`` otherwise)."""
    if isinstance(requests, str) or not isinstance(requests, Sequence):
        raise TypeError(f"requests must be a list of Request, got {type(requests).__name__}")
    for i, request in enumerate(requests):
        check_instance(f"requests[{i}]", request, Request)
    arrivals = [r.arrival_s for r in requests]
    if not requests or (ordered and arrivals != sorted(arrivals)):
        order = " sorted by arrival time" if ordered else ""
        raise ValueError(f"requests must be a non-empty list{order}, got {len(requests)} "
                         "request(s)")
    return list(requests)


def request_stream(n: int, rate_per_s: float, seed: int, prompt: tuple[int, int] = (16, 512),
                   output: tuple[int, int] = (16, 512)) -> list[Request]:
    """``n`` requests arriving at ``rate_per_s`` on average (exponential gaps), with prompt
    and output lengths drawn uniformly from the inclusive ranges ``prompt`` and ``output``,
    all from ``numpy.random.default_rng(seed)``."""
    check_int("n", n, 1)
    check_positive("rate_per_s", rate_per_s)
    for name, bounds in (("prompt", prompt), ("output", output)):
        low, high, *more = check_ints(name, bounds, 1, minimum_count=2)
        if more or low > high:
            raise ValueError(f"{name} must be a range (low, high) with low <= high, got "
                             f"{tuple(bounds)}")
    rng = np.random.default_rng(check_int("seed", seed, 0))
    arrivals = np.cumsum(rng.exponential(1 / rate_per_s, n))
    prompts = rng.integers(prompt[0], prompt[1] + 1, n)
    outputs = rng.integers(output[0], output[1] + 1, n)
    return [Request(float(a), int(p), int(o)) for a, p, o in zip(arrivals, prompts, outputs,
                                                                  strict=True)]


@dataclass(frozen=True)
class StepCost:
    """What a step costs on one GPU at the roofline: a model of ``n_params`` parameters in
    ``bytes_per_param`` bytes, ``kv_bytes_per_token`` of cache per token, on a GPU of
    ``peak_flops`` and ``peak_bandwidth``."""

    n_params: float
    peak_flops: float
    peak_bandwidth: float
    kv_bytes_per_token: float
    bytes_per_param: float = 2

    def __post_init__(self) -> None:
        for name in ("n_params", "peak_flops", "peak_bandwidth", "bytes_per_param"):
            check_positive(name, getattr(self, name))
        check_real("kv_bytes_per_token", self.kv_bytes_per_token, 0)

    def decode(self, batch: int, context_tokens: int) -> float:
        """Seconds of a decode step of ``batch`` sequences holding ``context_tokens``."""
        return decode_step_time(self.n_params, batch, self.peak_flops, self.peak_bandwidth,
                                context_tokens, self.kv_bytes_per_token, self.bytes_per_param)

    def prefill(self, tokens: int) -> float:
        """Seconds to prefill ``tokens`` prompt tokens in one pass."""
        return prefill_time(self.n_params, tokens, self.peak_flops, self.peak_bandwidth,
                            self.kv_bytes_per_token, self.bytes_per_param)


@dataclass(frozen=True)
class Served:
    """A simulated run: each request's ``finish_s`` and ``first_token_s`` (in the stream's
    order), and the timeline ``times_s`` (the start of every step) with the requests
    ``running`` in it and the slots ``computing`` (static batches keep computing finished
    requests' slots)."""

    policy: str
    requests: tuple[Request, ...]
    finish_s: np.ndarray
    first_token_s: np.ndarray
    times_s: np.ndarray
    running: np.ndarray
    computing: np.ndarray

    @property
    def latency_s(self) -> np.ndarray:
        """Seconds from each request's arrival to its last token."""
        return self.finish_s - np.array([r.arrival_s for r in self.requests])

    @property
    def throughput(self) -> float:
        """Output tokens per second, over the time from the first arrival to the last
        token."""
        tokens = sum(r.output for r in self.requests)
        return tokens / (self.finish_s.max() - self.requests[0].arrival_s)


def simulate(requests: list[Request], cost: StepCost, max_batch: int,
             policy: str = "continuous") -> Served:
    """Serve ``requests`` (sorted by arrival) with at most ``max_batch`` running at once,
    by ``policy`` (:data:`POLICIES`), each step costing what ``cost`` says."""
    check_requests(requests)
    check_instance("cost", cost, StepCost)
    check_choice("policy", policy, POLICIES)
    check_int("max_batch", max_batch, 1)
    n = len(requests)
    made = np.zeros(n, int)  # tokens made so far per request
    finish, first = np.full(n, np.nan), np.full(n, np.nan)
    waiting, running = list(range(n)), []
    now, times, counts, slots = 0.0, [], [], []
    while waiting or running:
        if not running and requests[waiting[0]].arrival_s > now:
            now = requests[waiting[0]].arrival_s  # idle until the next arrival
        admit = policy == "continuous" or not running
        new = []
        while admit and waiting and len(running) + len(new) < max_batch and \
                requests[waiting[0]].arrival_s <= now:
            new.append(waiting.pop(0))
        decoding = [i for i in running if made[i] < requests[i].output]
        context = sum(requests[i].prompt + made[i] for i in decoding)
        step = cost.decode(len(running), context) if decoding else 0.0
        if new:
            step += cost.prefill(sum(requests[i].prompt for i in new))
        times.append(now)
        counts.append(len(decoding) + len(new))
        slots.append(len(running) + len(new))
        now += step
        for i in decoding + new:
            made[i] += 1
            if made[i] == 1:
                first[i] = now
            if made[i] == requests[i].output:
                finish[i] = now
        running += new
        if policy == "continuous" or all(made[i] == requests[i].output for i in running):
            running = [i for i in running if made[i] < requests[i].output]
    return Served(policy, tuple(requests), finish, first, np.array(times), np.array(counts),
                  np.array(slots))
