"""Adapt an SGLang CPU kernel source tree (``csrc/cpu``) to the SGLang 0.5.23 wheel.

Used by tools/get_sglang_cpu.sh, on a copy of ``python/sglang/kernels/aot``::

    python tools/sglang_cpu_shim.py AOT_DIR

The kernel tree that fetches whole (``liusy58/sglang`` at 6127d1d, 2026-08-21) is
about two months older than the 0.5.23 wheel. That wheel's Python passes
``k_scale``/``v_scale`` (fp8 KV) to ``decode_attention_cpu`` and
``extend_attention_cpu``, and ``is_causal`` to the latter. This script:

- writes two wrapper functions that take the new arguments and call the old
  kernels, refusing fp8 scales (anything but 1.0) and non-causal self-attention,
  which the old kernels cannot do;
- edits the two operator schemas to the new argument lists and points them at
  the wrappers;
- turns the pyproject for the CPU into the build's pyproject, with torch unpinned
  (the tree pins an older torch than 0.5.23's 2.14.1);
- raises the C++ standard to 20 (torch 2.14's headers need it).

With ``--portable`` (tools/get_sglang_cpu.sh passes it on a CPU without
AVX512-BF16 and AMX, such as an Intel Cascade Lake), it also builds a kernel
that runs there. The tree compiles for x86-64-v4 with ``-mavx512bf16
-mamx-*`` and its attention calls oneDNN's bf16 brgemm, which such a CPU
cannot run ("could not generate a kernel", or an illegal instruction). So:

- the compile flags become ``-march=native``: the tree's own AVX512 paths
  (guarded by CPU_CAPABILITY_AVX512, which needs AVX512-BF16 and AMX) give way to
  its portable ones, as on Arm;
- the x86-only sources (MoE, int8/int4/fp8 GEMM, fused QKV: AMX code a Llama
  never calls) keep their AVX512-BF16/AMX flags, with AVX-512's base flags
  for a CPU that has no AVX-512 at all (``X86_ONLY_FLAGS``), so that every
  operator the registry names is defined: compiled, never run on such a CPU;
- every ``at::native::cpublas::brgemm`` call in the attention kernels
  (``extend.cpp``, ``decode.cpp``) goes through ``findings_brgemm``, which calls
  oneDNN where the CPU has AVX512-BF16 (every AMX CPU has it), and otherwise multiplies the
  same VNNI-packed operands with a plain loop, accumulating in fp32.

Every edit is anchored on text the tree must contain; if an anchor is missing
(a newer or older tree), the script stops with the anchor it did not find,
rather than building a kernel that disagrees with the wheel. A tree that already
has the new signature is left as it is (nothing to shim).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

WRAPPERS = r"""
// ---- findings compat shim (tools/sglang_cpu_shim.py): the SGLang 0.5.23 wheel passes
// k_scale/v_scale and is_causal, which this kernel tree predates. Only unit scales (bf16 KV)
// and causal (or cross) attention are accepted.
static void findings_compat_decode_attention_cpu(
    at::Tensor& query, at::Tensor& k_cache, at::Tensor& v_cache, double k_scale, double v_scale,
    at::Tensor& output, const std::optional<at::Tensor>& key, const std::optional<at::Tensor>& value,
    at::Tensor& loc, at::Tensor& attn_logits, at::Tensor& req_to_token, at::Tensor& req_pool_indices,
    at::Tensor& seq_lens, double sm_scale, double logit_cap, bool is_cross_attn, int64_t window,
    std::optional<at::Tensor> encoder_lens, std::optional<at::Tensor> sinks) {
  TORCH_CHECK(k_scale == 1.0 && v_scale == 1.0, "findings compat shim: fp8 KV scales are not supported by this kernel build");
  decode_attention_cpu(query, k_cache, v_cache, output, key, value, loc, attn_logits, req_to_token,
                       req_pool_indices, seq_lens, sm_scale, logit_cap, is_cross_attn, window, encoder_lens, sinks);
}
static void findings_compat_extend_attention_cpu(
    at::Tensor& q_extend, const std::optional<at::Tensor>& k_extend, const std::optional<at::Tensor>& v_extend,
    at::Tensor& o_extend, at::Tensor& k_buffer, at::Tensor& v_buffer, double k_scale, double v_scale,
    at::Tensor& req_to_token, at::Tensor& req_pool_indices, at::Tensor& seq_lens, at::Tensor& extend_seq_lens,
    at::Tensor& extend_start_loc, int64_t max_len_extend, double sm_scale, double logit_cap, bool is_cross_attn,
    int64_t window, std::optional<at::Tensor> encoder_lens, std::optional<at::Tensor> sinks,
    std::optional<at::Tensor> tree_mask, bool is_causal) {
  TORCH_CHECK(k_scale == 1.0 && v_scale == 1.0, "findings compat shim: fp8 KV scales are not supported by this kernel build");
  TORCH_CHECK(is_causal || is_cross_attn, "findings compat shim: non-causal self-attention is not supported by this kernel build");
  extend_attention_cpu(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, req_to_token, req_pool_indices,
                       seq_lens, extend_seq_lens, extend_start_loc, max_len_extend, sm_scale, logit_cap, is_cross_attn,
                       window, encoder_lens, sinks, tree_mask);
}

"""


BRGEMM_FALLBACK = r"""#pragma once
// findings compat shim (tools/sglang_cpu_shim.py --portable): oneDNN's bf16 brgemm
// needs AVX512-BF16 or AMX. Elsewhere, the same product on the same VNNI-packed B
// (element (k, n) at ((k / 2) * ldb + n) * 2 + k % 2), in fp32, with a plain loop.
#include <ATen/native/CPUBlas.h>

namespace {

inline bool findings_has_brgemm() {
  // Every CPU with AMX-BF16 has AVX512-BF16 too.
  static const bool ok = (__builtin_cpu_init(), __builtin_cpu_supports("avx512bf16"));
  return ok;
}

template <typename T>
inline void findings_brgemm(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, bool add_C,
                            const T* A, const T* B, float* C) {
  if (findings_has_brgemm()) {
    at::native::cpublas::brgemm(M, N, K, lda, ldb, ldc, add_C, A, B, C);
    return;
  }
  for (int64_t m = 0; m < M; ++m) {
    float* c = C + m * ldc;
    if (!add_C) {
      for (int64_t n = 0; n < N; ++n) c[n] = 0.f;
    }
    const T* a = A + m * lda;
    for (int64_t k = 0; k < K; ++k) {
      const float av = static_cast<float>(a[k]);
      const T* b = B + (k >> 1) * ldb * 2 + (k & 1);
      for (int64_t n = 0; n < N; ++n) c[n] += av * static_cast<float>(b[n * 2]);
    }
  }
}

inline void findings_brgemm_release() {
  if (findings_has_brgemm()) at::native::cpublas::brgemm_release();
}

}  // namespace
"""


class ShimError(Exception):
    pass


def _sub_once(text: str, pattern: str, repl: str, what: str) -> str:
    new, n = re.subn(pattern, repl, text, count=1)
    if n != 1:
        raise ShimError(f"anchor not found ({what}): /{pattern}/")
    return new


def shim_extension(src: str) -> str:
    if "float k_scale" in src or "findings_compat_" in src:
        return src
    src = _sub_once(src, r"\nTORCH_LIBRARY_FRAGMENT\(sgl_kernel, m\) \{", WRAPPERS + "TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {",
                    "the operator registry")
    src = _sub_once(src, r'("decode_attention_cpu\(Tensor query, Tensor k_cache, Tensor v_cahce, )',
                    r"\1float k_scale, float v_scale, ", "decode schema")
    src = _sub_once(src, r'(m\.impl\("decode_attention_cpu", torch::kCPU, &)decode_attention_cpu\)',
                    r"\1findings_compat_decode_attention_cpu)", "decode impl")
    # The extend schema spans several string literals; its v_buffer argument is the
    # first after k_buffer.
    i = src.index('"extend_attention_cpu(Tensor q_extend')
    head, tail = src[:i], src[i:]
    tail = _sub_once(tail, r"(Tensor v_buffer, )", r"\1float k_scale, float v_scale, ", "extend schema: v_buffer")
    tail = _sub_once(tail, r"Tensor\? tree_mask=None\) -> \(\)", "Tensor? tree_mask=None, bool is_causal=True) -> ()",
                     "extend schema: tree_mask")
    tail = _sub_once(tail, r'(m\.impl\("extend_attention_cpu", torch::kCPU, &)extend_attention_cpu\)',
                     r"\1findings_compat_extend_attention_cpu)", "extend impl")
    return head + tail


#: The x86-only sources' flags in a portable build: their own AVX512-BF16/AMX
#: flags, and AVX-512's base (F, DQ, BW, VL), which ``-march=native`` does not
#: give on a CPU without AVX-512 (an AVX2-only EPYC: their intrinsics and
#: torch's vec512 headers then fail to compile, "target specific option
#: mismatch"; D152). Compiled, never run: a Llama calls none of them.
X86_ONLY_FLAGS = "-mavx512f;-mavx512dq;-mavx512bw;-mavx512vl;-mavx512bf16;-mavx512vnni;-mamx-tile;-mamx-bf16;-mamx-int8"


def portable(cpu: Path) -> list[str]:
    """Edits for a CPU without AVX512-BF16 and AMX (see the module's doc)."""
    done = []
    cmake = cpu / "CMakeLists.txt"
    text = cmake.read_text()
    if "findings portable" not in text:
        text = _sub_once(text, r"-march=x86-64-v4\s+-mavx512bf16\s+-mavx512vnni\s+-mamx-tile\s+-mamx-bf16\s+-mamx-int8",
                         "-march=native  # findings portable: no AVX512-BF16/AMX flags", "x86 compile flags")
        # The x86-only sources (AMX code a Llama never calls) keep their ISA flags, with
        # AVX-512's base for a CPU without it, so that every operator the registry names
        # is defined; they are compiled, never run here.
        text = _sub_once(text, r"(\nif\(CMAKE_SYSTEM_PROCESSOR MATCHES \"aarch64\|arm64\"\)\n\s+add_compile_definitions\(SGLANG_CPU_ARM64_SKIP_X86_ONLY_OPS\))",
                         "\nif(NOT CMAKE_SYSTEM_PROCESSOR MATCHES \"aarch64|arm64\")  # findings portable\n"
                         "    set_source_files_properties(${SGLANG_CPU_X86_ONLY_SOURCES} PROPERTIES COMPILE_OPTIONS "
                         "\"" + X86_ONLY_FLAGS + "\")\nendif()\\1",
                         "x86-only sources")
        cmake.write_text(text)
        done.append("portable: -march=native; the x86-only (AMX) sources keep their flags, unused")
    (cpu / "findings_brgemm.h").write_text(BRGEMM_FALLBACK)
    for name in ("extend.cpp", "decode.cpp"):
        f = cpu / name
        src = f.read_text()
        if "findings_brgemm" in src:
            continue
        n = src.count("at::native::cpublas::brgemm(")
        if n == 0:
            raise ShimError(f"anchor not found ({name}: at::native::cpublas::brgemm)")
        src = src.replace("at::native::cpublas::brgemm(", "findings_brgemm(")
        src = src.replace("at::native::cpublas::brgemm_release()", "findings_brgemm_release()")
        src = '#include "findings_brgemm.h"\n' + src
        f.write_text(src)
        done.append(f"portable: {name}: {n} brgemm calls through findings_brgemm")
    return done


def shim_tree(aot: Path, portable_build: bool = False) -> list[str]:
    done = []
    ext = aot / "csrc" / "cpu" / "torch_extension_cpu.cpp"
    cmake = aot / "csrc" / "cpu" / "CMakeLists.txt"
    pyproject_cpu = aot / "pyproject_cpu.toml"
    for p in (ext, cmake, pyproject_cpu):
        if not p.is_file():
            raise ShimError(f"{p} is missing: is {aot} SGLang's python/sglang/kernels/aot?")
    before = ext.read_text()
    after = shim_extension(before)
    if after != before:
        ext.write_text(after)
        done.append("attention signatures shimmed")
    text = cmake.read_text()
    text2 = re.sub(r"set\(CMAKE_CXX_STANDARD 17\)", "set(CMAKE_CXX_STANDARD 20)", text)
    if text2 != text:
        cmake.write_text(text2)
        done.append("C++17 -> C++20")
    py = pyproject_cpu.read_text()
    py2 = re.sub(r'"torch==[0-9.]+"', '"torch"', py)
    (aot / "pyproject.toml").write_text(py2)
    done.append("pyproject_cpu.toml -> pyproject.toml (torch unpinned)")
    if portable_build:
        done += portable(aot / "csrc" / "cpu")
    return done


def main(argv: list[str]) -> int:
    flags = [a for a in argv if a.startswith("--")]
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 1 or set(flags) - {"--portable"}:
        print("usage: sglang_cpu_shim.py AOT_DIR [--portable]", file=sys.stderr)
        return 2
    try:
        for line in shim_tree(Path(args[0]), "--portable" in flags):
            print(f"[sglang_cpu_shim] {line}", file=sys.stderr)
    except ShimError as exc:
        print(f"[sglang_cpu_shim] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
