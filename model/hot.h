// ATTN_HOT marks a hot loop to be compiled for AVX-512, AVX2+FMA and
// baseline x86-64; the loader picks the best the CPU has, so one binary
// serves any x86-64 machine. Only the kernel files include this.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ATTN_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ATTN_HOT
#endif
