"""`python -m gpudl estimate ...`: the calculators of Chapter 7 on the command line print what
gpudl.estimate computes, and refuse bad input with a usage error."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpudl.__main__ import main
from gpudl.estimate import training_flops, training_time
from gpudl.hardware import SPECS

ROOT = Path(__file__).resolve().parent.parent
A100 = "A100 80GB SXM"


def test_help_lists_the_calculators_in_a_fresh_process():
    out = subprocess.run([sys.executable, "-m", "gpudl", "estimate", "--help"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env=os.environ | {"PYTHONUNBUFFERED": "1"})
    assert out.returncode == 0, out.stderr
    for calculator in ("time", "mfu", "memory", "gpus"):
        assert calculator in out.stdout


def test_every_calculator_has_its_own_help(capsys):
    for calculator in ("time", "mfu", "memory", "gpus"):
        with pytest.raises(SystemExit) as err:
            main(["estimate", calculator, "--help"])
        assert err.value.code == 0
        assert f"estimate {calculator}" in capsys.readouterr().out


def test_time_prints_the_estimators_numbers(capsys):
    main(["estimate", "time", "--params", "1e9", "--tokens", "20.2e9", "--gpu", A100,
          "--gpus", "4", "--mfu", "0.4", "--price", "2"])
    out = capsys.readouterr().out
    seconds = training_time(training_flops(1e9, 20.2e9), 4, 312e12, 0.4)
    assert "training compute: 1.212e+20 flop" in out
    assert f"{seconds / 3600:.4g} h" in out and "67.44 h" in out
    assert f"{seconds / 3600 * 4:.4g} GPU-hours" in out
    assert f"{seconds * 4 * 400 / 3.6e6:.4g} kWh" in out  # 400 W board power
    assert f"cost at 2 per GPU-hour: {seconds / 3600 * 4 * 2:.4g}" in out


def test_time_with_the_attention_term(capsys):
    main(["estimate", "time", "--params", "540e9", "--tokens", "780e9", "--layers", "118",
          "--heads", "48", "--head-dim", "256", "--seq-len", "2048", "--gpu", "H100 SXM",
          "--mfu", "0.5"])
    expected = training_flops(540e9, 780e9, n_layers=118, n_heads=48, head_dim=256,
                              seq_len=2048)
    assert f"training compute: {expected:.4g} flop" in capsys.readouterr().out


def test_mfu_of_the_articles_a100_run_is_impossible(capsys):
    main(["estimate", "mfu", "--params", "1e9", "--tokens", "20.2e9", "--hours", "18",
          "--gpu", A100, "--gpus", "4", "--dtype", "fp16"])
    out = capsys.readouterr().out
    assert "MFU 149.9%" in out and "cannot all be true" in out


def test_mfu_from_tokens_per_second(capsys):
    # PaLM's throughput on A100s instead of TPUs: 238.3e3 * 6 * 540e9 / (6144 * 312e12)
    main(["estimate", "mfu", "--params", "540e9", "--tokens-per-second", "238.3e3",
          "--gpu", A100, "--gpus", "6144"])
    out = capsys.readouterr().out
    assert f"MFU {238.3e3 * 6 * 540e9 / (6144 * 312e12):.1%}" in out
    assert "cannot all be true" not in out


def test_memory_adds_activations_and_names_the_gpus_that_fit(capsys):
    main(["estimate", "memory", "--params", "1e9", "--seq-len", "2048", "--batch", "1",
          "--hidden", "2048", "--heads", "16", "--layers", "20"])
    out = capsys.readouterr().out
    assert "model state per GPU: 16 GB" in out
    assert "total per GPU: 25.56 GB" in out  # 16 + 20 x 2048 x 2048 x (34 + 80) bytes
    fits = next(line for line in out.splitlines() if line.startswith("fits on:"))
    assert "V100 SXM2 32GB" in fits and "RTX 4090" not in fits


def test_memory_with_zero_stage_3(capsys):
    main(["estimate", "memory", "--params", "7.5e9", "--gpus", "64", "--zero-stage", "3"])
    assert "model state per GPU: 1.875 GB" in capsys.readouterr().out  # ZeRO's 1.9 GB


def test_gpus_table_has_a_row_per_gpu(capsys):
    main(["estimate", "gpus", "--gb-per-gpu", "48"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(SPECS)
    a6000 = next(line for line in lines if line.startswith("RTX A6000"))
    assert a6000.split()[2] == "48" and a6000.endswith("yes")


@pytest.mark.parametrize("argv, message", [
    (["time", "--params", "1e9", "--tokens", "1e9", "--gpu", "A100", "--mfu", "0.5"],
     "invalid choice: 'A100'"),
    (["time", "--params", "1e9", "--tokens", "1e9", "--gpu", "H100 SXM", "--mfu", "1.5"],
     r"mfu must be in \(0, 1\]"),
    (["time", "--params", "-1", "--tokens", "1e9", "--gpu", "H100 SXM", "--mfu", "0.5"],
     "n_params must be > 0"),
    (["time", "--params", "1e9", "--tokens", "1e9", "--gpu", "V100 SXM2 32GB", "--mfu", "0.5"],
     "no bf16 units"),
    (["time", "--params", "1e9", "--tokens", "1e9", "--gpu", "H100 SXM", "--mfu", "0.5",
      "--layers", "4"], "missing n_heads"),
    (["mfu", "--params", "1e9", "--gpu", "H100 SXM"], "give --tokens-per-second"),
    (["mfu", "--params", "1e9", "--gpu", "H100 SXM", "--tokens-per-second", "1e3",
      "--tokens", "1e9", "--hours", "1"], "not both"),
    (["mfu", "--params", "1e9", "--gpu", "H100 SXM", "--tokens", "1e9", "--hours", "0"],
     "--hours must be > 0"),
    (["memory", "--params", "1e9", "--seq-len", "2048"], "need all of"),
    (["memory", "--params", "1e9", "--gpus", "0"], "n_gpus"),
    (["memory", "--params", "1e9", "--zero-stage", "4"], "invalid choice"),
    (["gpus", "--gb-per-gpu", "-1"], "bytes_per_gpu"),
])
def test_bad_input_is_a_usage_error(capsys, argv, message):
    with pytest.raises(SystemExit) as err:
        main(["estimate", *argv])
    assert err.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_unknown_gpu_error_lists_the_known_ones(capsys):
    with pytest.raises(SystemExit):
        main(["estimate", "time", "--params", "1e9", "--tokens", "1e9", "--gpu", "A200",
              "--mfu", "0.5"])
    err = capsys.readouterr().err
    assert all(repr(name) in err for name in SPECS)
