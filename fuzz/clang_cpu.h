/*
 * Forced into every engine file of the fuzz build (-include): clang 14
 * rejects __builtin_cpu_supports("f16c") (GCC accepts it), which
 * engine/src/kernels/quant.c asks when it picks kernels.  Fuzzing runs the scalar
 * kernels: the SIMD ones are not what the targets look at.
 */
#define __builtin_cpu_supports(feature) 0
