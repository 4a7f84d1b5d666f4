"""Pipeline parallelism: the encoder's blocks cut into stages, one per rank.

Book section: *Chapter 6, "Pipeline parallelism"* and *"The bubble"*. One module per topic:
:mod:`.schedule` (the maths: stages, schedules, the simulated bubble), :mod:`.comms` (a
stage's sends and receives) and :mod:`.training` (the timed runs, by hand and by
``torch.distributed.pipelining``; ``torchrun --standalone --nproc_per_node=4 -m
gpudl.parallel.pipeline gpipe 8``). Every public name is importable from
:mod:`gpudl.parallel.pipeline` itself.
"""

from gpudl.parallel.pipeline.comms import exchange
from gpudl.parallel.pipeline.schedule import (
    SCHEDULES,
    check_schedule,
    idle_fraction,
    schedule,
    simulate,
    stage_layers,
)
from gpudl.parallel.pipeline.training import (
    CPU_CONFIG,
    CPU_PACE_S,
    ENGINES,
    GPU_CONFIG,
    PipelinePlan,
    main,
    pipeline_worker,
    run_pipelines,
)

__all__ = [
    "CPU_CONFIG",
    "CPU_PACE_S",
    "ENGINES",
    "GPU_CONFIG",
    "SCHEDULES",
    "PipelinePlan",
    "check_schedule",
    "exchange",
    "idle_fraction",
    "main",
    "pipeline_worker",
    "run_pipelines",
    "schedule",
    "simulate",
    "stage_layers",
]
