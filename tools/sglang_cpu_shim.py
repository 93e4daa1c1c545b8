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


def shim_tree(aot: Path) -> list[str]:
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
    return done


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: sglang_cpu_shim.py AOT_DIR", file=sys.stderr)
        return 2
    try:
        for line in shim_tree(Path(argv[0])):
            print(f"[sglang_cpu_shim] {line}", file=sys.stderr)
    except ShimError as exc:
        print(f"[sglang_cpu_shim] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
