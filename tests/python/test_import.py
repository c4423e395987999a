"""tilewire's Python package without a GPU (CI): import, info(), the NCCL check, error mapping."""
import pytest

import tilewire
from tilewire import _C


def test_import_and_version():
    assert tilewire.__version__ == _C.version()
    runtime, headers = _C.nccl_versions()
    assert runtime == headers >= 22809  # the import check let it through


def test_info_is_the_cli_report():
    r = tilewire.info()
    assert r["tilewire"] == tilewire.__version__
    assert r["nccl_match"] is True
    assert isinstance(r["gpus"], list) and isinstance(r["gpu_present"], bool)
    if not r["gpu_present"]:
        assert r["no_gpu_reason"]  # says why


def test_nccl_mismatch_is_an_import_error_naming_both():
    tilewire._check_nccl(22809, 22809)
    with pytest.raises(ImportError) as e:
        tilewire._check_nccl(22803, 22809)
    assert "2.28.9" in str(e.value) and "2.28.3" in str(e.value) and "nvidia-nccl-cu13==2.28.9" in str(e.value)


@pytest.mark.parametrize("code,exc", [(0, ValueError), (1, NotImplementedError), (5, TimeoutError), (6, RuntimeError),
                                      (3, RuntimeError)])
def test_errors_map_to_python_exceptions(code, exc):
    with pytest.raises(exc, match="the message"):
        _C._raise(code, "the message")


def test_comm_without_a_gpu_says_so():
    if tilewire.info()["gpu_present"]:
        pytest.skip("a GPU is visible")
    with pytest.raises((NotImplementedError, RuntimeError), match="GPU|device|driver"):
        _C.Comm(b"\0" * 128, 0, 1, 0)
    with pytest.raises(ValueError, match="128 bytes"):
        _C.Comm(b"short", 0, 1, 0)


def test_bad_arguments_are_value_errors_before_any_gpu_work():
    with pytest.raises(ValueError, match="dtype 'int8'"):
        _C.gemm(0, 0, 0, 1, 1, 1, "int8", "nk", 0)
    with pytest.raises(ValueError, match="b_layout"):
        _C.gemm(0, 0, 0, 1, 1, 1, "bfloat16", "mn", 0)
    with pytest.raises(ValueError, match="path 'fast'"):
        _C.gemm_allreduce_workspace_size(128, 128, 128, "bfloat16", "nk", 2, "fast", "auto", "bfloat16")
    assert _C.gemm_allreduce_workspace_size(1024, 1024, 512, "bfloat16", "nk", 2, "fused", "auto", "bfloat16") > 0


def test_torch_is_not_needed_to_import():
    # A fresh interpreter: `import tilewire` must not pull torch in (it is imported only inside
    # the functions that take tensors), so the package works where torch is absent or unwanted.
    import subprocess
    import sys
    code = "import sys, tilewire, tilewire.comm as c; assert c._DTYPES['torch.bfloat16'] == 'bfloat16'; " \
           "sys.exit(3 if 'torch' in sys.modules else 0)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, f"import tilewire imported torch (rc {r.returncode}): {r.stderr[-400:]}"
