// What this CPU can run, asked once: the products (packed, int8, bf16)
// choose their instruction-set paths from these at run time, so one binary
// serves every x86-64 machine. Each is false off x86-64.
#pragma once

namespace attn::kernels {

// AVX2 with FMA (x86-64-v3's vector core).
inline bool CpuHasAvx2() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

// AVX-512 F and BW: 32 vector registers of 16 floats, byte and word lanes.
inline bool CpuHasAvx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
#else
  return false;
#endif
}

// AVX-512 with VNNI's int8 dot products (vpdpbusd).
inline bool CpuHasAvx512Vnni() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = CpuHasAvx512() && __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

// AVX-512 with BF16's dot products of bf16 pairs (vdpbf16ps).
inline bool CpuHasAvx512Bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = CpuHasAvx512() && __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

}  // namespace attn::kernels
