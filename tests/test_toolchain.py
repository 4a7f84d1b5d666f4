"""gpudl.toolchain: the one line that says whether a driver runs what numba-cuda makes, the
pieces pip installs for a driver, and the command on this machine (no GPU: the compiler facts
come from numba-cuda's real target in a child process)."""

import subprocess
import sys
from importlib import metadata

import pytest

from gpudl import toolchain
from gpudl.toolchain import Toolchain, install_requirements, verdict

EXTRAS = {"gpu": ["numba-cuda[cu12]==0.30.4"], "gpu-cu13": ["numba-cuda[cu13]==0.30.4"]}


def machine(driver=(12, 4), nvjitlink=(12, 9), isa="8.8", ptx=(12, 9)) -> Toolchain:
    return Toolchain(gpu="Tesla T4", driver="550.54.15", driver_cuda=driver,
                     nvjitlink=nvjitlink, ptx_isa=isa, ptx_cuda=ptx)


def test_a_cubin_linked_here_runs_on_an_older_driver_of_its_major_version():
    # Colab's T4 of February 2025: driver 550 (CUDA 12.4), CUDA 12.9's NVVM and nvJitLink
    line = verdict(machine())
    assert line.startswith("OK: nvJitLink 12.9 links each kernel into a cubin")
    assert "525 series" in line and "CUDA 12.4" in line


def test_ptx_left_to_an_older_driver_is_the_colab_failure_of_2025():
    # numba-cuda without nvJitLink: the driver must read PTX ISA 8.5 (CUDA 12.5), runs 12.4
    line = verdict(machine(nvjitlink=None, isa="8.5", ptx=(12, 5)))
    assert line.startswith("MISMATCH") and "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" in line
    assert "gpudl[gpu]" in line
    assert verdict(machine(driver=(12, 5), nvjitlink=None, isa="8.5", ptx=(12, 5))).startswith(
        "OK: NVVM writes PTX ISA 8.5 (CUDA 12.5), which the driver compiles itself")


def test_an_nvjitlink_older_than_nvvm_is_a_mismatch_with_its_pin():
    # torch pinned nvJitLink 12.6; the toolkit's newest NVVM writes CUDA 12.9's PTX
    line = verdict(machine(nvjitlink=(12, 6)))
    assert line.startswith("MISMATCH") and "cuda-toolkit==12.6.*" in line


def test_cuda_13_pieces_need_a_cuda_13_driver_and_cuda_12_ones_run_on_it():
    line = verdict(machine(driver=(12, 8), nvjitlink=(13, 5), isa="9.5", ptx=(13, 5)))
    assert line.startswith("MISMATCH") and "gpudl[gpu]" in line and "580 series" in line
    assert verdict(machine(driver=(13, 0))).startswith("OK")


def test_no_driver_no_nvvm_and_an_old_driver_each_say_so():
    assert verdict(machine(driver=None)).startswith("NO GPU")
    missing = Toolchain("T4", "550.54.15", (12, 4), (12, 9), None, None, "ToolkitMissing: x")
    assert verdict(missing).startswith("MISMATCH: numba-cuda finds no NVVM (ToolkitMissing: x)")
    assert "525 series" in verdict(machine(driver=(11, 8)))
    with pytest.raises(TypeError, match="t"):
        verdict(("not", "facts"))


def test_install_takes_the_extra_of_the_driver_and_holds_nvvm_to_torch_s_nvjitlink():
    assert install_requirements((12, 4), {}, EXTRAS) == ["numba-cuda[cu12]==0.30.4"]
    assert install_requirements((12, 4), {12: (12, 6), 13: None}, EXTRAS) == [
        "numba-cuda[cu12]==0.30.4", "cuda-toolkit==12.6.*"]
    assert install_requirements((13, 2), {}, EXTRAS) == ["numba-cuda[cu13]==0.30.4"]
    assert install_requirements((14, 0), {13: (13, 0)}, EXTRAS) == [
        "numba-cuda[cu13]==0.30.4", "cuda-toolkit==13.0.*"]
    with pytest.raises(ValueError, match="525 series"):
        install_requirements((11, 8), {}, EXTRAS)


def test_install_follows_the_cuda_of_the_torch_installed():
    # a CUDA 12 torch under a CUDA 13 driver: CUDA 12's pieces, whose cubins that driver loads
    assert install_requirements((13, 0), {12: (12, 8), 13: None}, EXTRAS) == [
        "numba-cuda[cu12]==0.30.4", "cuda-toolkit==12.8.*"]
    # a CUDA 13 torch under a CUDA 12 driver cannot run there: the driver's pieces
    assert install_requirements((12, 4), {12: None, 13: (13, 0)}, EXTRAS) == [
        "numba-cuda[cu12]==0.30.4"]
    assert install_requirements((13, 0), {12: (12, 8), 13: (13, 0)}, EXTRAS) == [
        "numba-cuda[cu13]==0.30.4", "cuda-toolkit==13.0.*"]


def test_install_reads_the_extras_from_gpudl_s_metadata_or_pyproject(monkeypatch):
    # installed (editable here) or not (a checkout on PYTHONPATH), the extras are pyproject's
    for installed in (True, False):
        if not installed:
            def missing(name):
                raise metadata.PackageNotFoundError(name)

            monkeypatch.setattr(metadata, "requires", missing)
        assert install_requirements((12, 0), {}) == ["numba-cuda[cu12]==0.30.4"]
        assert install_requirements((13, 0), {}) == ["numba-cuda[cu13]==0.30.4"]


def test_the_ptx_isa_table_is_cuda_bindings():
    assert toolchain.ptx_cuda("8.8") == (12, 9)
    assert toolchain.ptx_cuda("9.0") in ((13, 0), None)  # cuda-bindings 12's table ends at 8.8
    assert toolchain.ptx_cuda("0.1") is None


def test_the_report_names_each_piece():
    lines = toolchain.report(machine())
    assert lines[0] == "GPU: Tesla T4, driver 550.54.15, which runs CUDA 12.4 and older"
    assert lines[1] == "NVVM: writes PTX ISA 8.8, which CUDA 12.9 and later read"
    assert lines[2].startswith("nvJitLink: 12.9 (numba-cuda links with it")
    assert lines[3] == verdict(machine())


def test_the_first_kernel_runs_here():
    assert toolchain.smoke_test().endswith("vector_add correct")


@pytest.mark.compiler
@pytest.mark.simulator_only
def test_the_command_reports_this_machine_s_nvvm_without_a_gpu():
    done = subprocess.run([sys.executable, "-m", "gpudl", "toolchain"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "GPU: none (no CUDA driver)"
    assert lines[1].startswith("NVVM: writes PTX ISA ")
    assert lines[-1].startswith("NO GPU: ")
