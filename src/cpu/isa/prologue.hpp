// Included by each source of src/cpu/isa/ after all its other headers and before its own code (no
// include guard: once per source). CMake compiles those sources once per ISA, defining
// FLASHBENCH_CPU_ISA (the ISA's name, also the namespace its code lives in: flashbench::cpu::avx2)
// and FLASHBENCH_CPU_ISA_LEVEL (0 scalar, 2 avx2, 3 avx512), at the baseline -march=x86-64-v2.
//
// Everything defined after this header is compiled for that ISA by a target pragma, and nothing
// before it is: the inline functions and templates of the standard library, fmt and the project's
// headers stay baseline code. The linker keeps one copy of each such function for the whole program,
// whichever object it comes from, so a copy compiled for AVX-512 could otherwise be the one an AVX2
// machine runs (SIGILL). The kernels' own functions are in the ISA's namespace or have internal
// linkage, so no two ISAs share a symbol. (A header first included after this one would be compiled
// for the ISA: include every header above it.)
#if !defined(FLASHBENCH_CPU_ISA) || !defined(FLASHBENCH_CPU_ISA_LEVEL)
#error "src/cpu/isa/ is compiled once per ISA: CMake defines FLASHBENCH_CPU_ISA and FLASHBENCH_CPU_ISA_LEVEL"
#endif

#if defined(__clang__)
#error "the CPU kernels are GCC code (its vector extensions, __builtin_shuffle and target pragmas): build them with g++"
#endif
#pragma GCC push_options
#if FLASHBENCH_CPU_ISA_LEVEL == 3
#pragma GCC target("arch=x86-64-v4")
#elif FLASHBENCH_CPU_ISA_LEVEL == 2
#pragma GCC target("arch=x86-64-v3")
#else
#pragma GCC target("arch=x86-64-v2")
#endif
