"""Distributed training with torch.distributed: one package per parallel strategy, each with its
collectives apart from its maths, over one shared floor.

Book section: *Chapter 5, "Data parallelism"* and *Chapter 6, "Model parallelism"* (and the
chapters that first use each piece).

The floor every strategy stands on:

* :mod:`.spawn`: starting workers (``worker(rank, world_size, *args)``) from a notebook
  (:func:`gpudl.parallel.spawn.spawn`) or under ``torchrun``
  (:func:`gpudl.parallel.spawn.run_under_torchrun`), the rank's device and clock;
* :mod:`.messages`: the messages collectives are checked with;
* :mod:`.degrees`: how many ways each strategy splits the work, checked once;
* :mod:`.one_process`: the toy models, their batches, and the same training in one process,
  which every strategy must reproduce;
* :mod:`.encoder_plan`: the Megatron split of the encoder as a DTensor plan.

The strategies, siblings that import the floor and never each other: :mod:`.data`
(Chapter 5, with its gradient timeline), :mod:`.zero` (Chapter 6's sharded optimizer and
sharded state), :mod:`.pipeline` and :mod:`.tensor` (Chapter 6),
:mod:`.mesh` (FSDP2 on the encoder and the two-dimensional mesh, Chapter 6),
:mod:`.context` (ring and head-parallel attention over a long sequence, Chapter 11) and
:mod:`.experts` (mixture of experts and expert parallelism, Chapter 11). Those of Chapters 5
and 6, and expert parallelism, run under ``torchrun -m gpudl.parallel.<strategy>``.
"""
