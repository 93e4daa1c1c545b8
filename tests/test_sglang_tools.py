"""The SGLang CPU build's own tools, without SGLang (issue 24): the kernel
shim's edits (tools/sglang_cpu_shim.py) on a tree that has the anchors, its
refusal of a tree that lacks one, and tools/get_sglang_cpu.sh's one-line
refusals before anything is downloaded. The build itself, and SGLang serving,
are checked by `make test-engine` (tests/engine/test_sglang_conformance.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("sglang_cpu_shim", ROOT / "tools" / "sglang_cpu_shim.py")
assert _spec and _spec.loader
shim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shim)

# The anchors as the kernel tree (python/sglang/kernels/aot, 2026-08) has them, in small.
EXTENSION = '''void decode_attention_cpu(at::Tensor& query);
TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  m.def(
      "decode_attention_cpu(Tensor query, Tensor k_cache, Tensor v_cahce, Tensor(a!) output, Tensor? key, Tensor? "
      "value) -> ()");
  m.impl("decode_attention_cpu", torch::kCPU, &decode_attention_cpu);
  m.def(
      "extend_attention_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, Tensor k_buffer, "
      "Tensor v_buffer, Tensor req_to_token, "
      "encoder_lens, Tensor? sinks, Tensor? tree_mask=None) -> ()");
  m.impl("extend_attention_cpu", torch::kCPU, &extend_attention_cpu);
}
'''
CMAKE = '''set(CMAKE_CXX_STANDARD 17)
set(SGLANG_CPU_X86_ONLY_SOURCES
    ${CMAKE_CURRENT_SOURCE_DIR}/moe.cpp
)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
    add_compile_definitions(SGLANG_CPU_ARM64_SKIP_X86_ONLY_OPS)
    list(REMOVE_ITEM SOURCES ${SGLANG_CPU_X86_ONLY_SOURCES})
endif()
if(MY_ARCH_DIR STREQUAL "x86_64")
    add_compile_options(
        -O3
        -march=x86-64-v4
        -mavx512bf16
        -mavx512vnni
        -mamx-tile
        -mamx-bf16
        -mamx-int8
        -fopenmp
    )
endif()
'''
ATTENTION = '''void f() {
  at::native::cpublas::brgemm(1, 2, 3, 4, 5, 6, false, a, b, c);
  at::native::cpublas::brgemm_release();
}
'''


def tree(tmp_path: Path) -> Path:
    aot = tmp_path / "aot"
    cpu = aot / "csrc" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "torch_extension_cpu.cpp").write_text(EXTENSION)
    (cpu / "CMakeLists.txt").write_text(CMAKE)
    (cpu / "extend.cpp").write_text(ATTENTION)
    (cpu / "decode.cpp").write_text(ATTENTION)
    (aot / "pyproject_cpu.toml").write_text('[build-system]\nrequires = ["scikit-build-core>=0.10", "torch==2.12.0"]\n')
    return aot


def test_the_shim_adapts_the_signatures_and_the_build(tmp_path: Path) -> None:
    aot = tree(tmp_path)
    done = shim.shim_tree(aot)
    ext = (aot / "csrc" / "cpu" / "torch_extension_cpu.cpp").read_text()
    assert "Tensor v_cahce, float k_scale, float v_scale, Tensor(a!) output" in ext
    assert "Tensor v_buffer, float k_scale, float v_scale, Tensor req_to_token" in ext
    assert "Tensor? tree_mask=None, bool is_causal=True) -> ()" in ext
    assert "&findings_compat_decode_attention_cpu)" in ext and "&findings_compat_extend_attention_cpu)" in ext
    assert ext.index("static void findings_compat_decode_attention_cpu") < ext.index("TORCH_LIBRARY_FRAGMENT")
    assert "set(CMAKE_CXX_STANDARD 20)" in (aot / "csrc" / "cpu" / "CMakeLists.txt").read_text()
    assert '"torch"' in (aot / "pyproject.toml").read_text() and "2.12.0" not in (aot / "pyproject.toml").read_text()
    assert "-mavx512bf16" in (aot / "csrc" / "cpu" / "CMakeLists.txt").read_text()  # not portable: flags kept
    assert len(done) == 3
    assert shim.shim_tree(aot) == ["pyproject_cpu.toml -> pyproject.toml (torch unpinned)"]  # idempotent


def test_the_portable_build_compiles_for_this_cpu_and_falls_back_from_brgemm(tmp_path: Path) -> None:
    aot = tree(tmp_path)
    shim.shim_tree(aot, portable_build=True)
    cpu = aot / "csrc" / "cpu"
    cmake = (cpu / "CMakeLists.txt").read_text()
    assert "-march=native" in cmake and "-march=x86-64-v4" not in cmake
    # The x86-only sources keep the AMX flags (defined, never run); the rest does not get them.
    # With AVX-512's base flags: without them a CPU with no AVX-512 (AVX2 only) cannot compile them (D152).
    assert ('set_source_files_properties(${SGLANG_CPU_X86_ONLY_SOURCES} PROPERTIES COMPILE_OPTIONS '
            '"-mavx512f;-mavx512dq;-mavx512bw;-mavx512vl;-mavx512bf16;') in cmake
    for name in ("extend.cpp", "decode.cpp"):
        src = (cpu / name).read_text()
        assert src.startswith('#include "findings_brgemm.h"')
        assert "at::native::cpublas::brgemm(" not in src and "findings_brgemm(1, 2, 3" in src
        assert "findings_brgemm_release()" in src
    header = (cpu / "findings_brgemm.h").read_text()
    assert '__builtin_cpu_supports("avx512bf16")' in header and "at::native::cpublas::brgemm(" in header
    again = shim.shim_tree(aot, portable_build=True)
    assert not any("brgemm calls" in line for line in again)  # idempotent


def test_a_tree_without_an_anchor_is_refused_naming_it(tmp_path: Path) -> None:
    aot = tree(tmp_path)
    ext = aot / "csrc" / "cpu" / "torch_extension_cpu.cpp"
    ext.write_text(EXTENSION.replace("Tensor v_buffer, ", "Tensor value_buffer, "))
    with pytest.raises(shim.ShimError, match="extend schema: v_buffer"):
        shim.shim_tree(aot)
    (aot / "pyproject_cpu.toml").unlink()
    with pytest.raises(shim.ShimError, match="pyproject_cpu.toml is missing"):
        shim.shim_tree(aot)
    r = subprocess.run(["python3", str(ROOT / "tools" / "sglang_cpu_shim.py"), str(tmp_path / "nowhere")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "error:" in r.stderr


def test_the_build_script_says_what_to_provide_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "FINDINGS_SGLANG_CACHE": str(tmp_path / "cache")}
    env.pop("SGLANG_SRC", None)
    r = subprocess.run(["bash", str(ROOT / "tools" / "get_sglang_cpu.sh")], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "get_sglang_cpu: no cached CPU kernel and SGLANG_SRC is unset: set SGLANG_SRC to an SGLang checkout "
        "(git clone https://github.com/sgl-project/sglang), the folder holding python/sglang/kernels/aot"]
    env["SGLANG_SRC"] = str(tmp_path)
    r = subprocess.run(["bash", str(ROOT / "tools" / "get_sglang_cpu.sh")], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "holds no python/sglang/kernels/aot" in r.stderr
    assert not any((tmp_path / "cache").glob("0.5.23-*"))  # nothing half-built left behind
