#pragma once
// Which instruction set the CPU kernels run on. The hot kernels (the gemm tiles, the vector exp and
// the softmax rows, the attention loops, the FMA peak loop) are compiled once for each ISA below
// (src/cpu/isa/) into one binary; at start-up the widest the CPU offers is chosen (CPUID), and
// `--isa` (or FLASHBENCH_ISA) forces another for A/B comparisons. Everything outside the kernels is
// compiled for the portable baseline (x86-64-v2), so one build runs on any x86-64 server at the speed
// of its widest vectors.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flashbench::cpu {

enum class Isa {
  scalar,  // no AVX and no FMA: the kernels' 8-float vectors lowered by the compiler to SSE2 pairs
  avx2,    // AVX2 + FMA (x86-64-v3: Haswell and later, AMD Zen 1-3), 16 ymm registers of 8 floats
  avx512,  // AVX-512 F/BW/DQ/VL (x86-64-v4: Skylake-SP and later, AMD Zen 4-5), 32 zmm registers of 16
};
inline constexpr Isa kAllIsas[] = {Isa::scalar, Isa::avx2, Isa::avx512};

std::string_view isa_name(Isa isa);                     // "scalar", "avx2", "avx512"
std::optional<Isa> parse_isa(std::string_view name);    // the names above
int64_t isa_lanes(Isa isa);                             // fp32 lanes of one vector: 8, 8, 16
bool cpu_supports(Isa isa);                             // CPUID (and the OS saving the registers)
Isa best_isa();                                         // the widest this CPU supports

// The ISA the kernels run on now: best_isa(), unless FLASHBENCH_ISA named another at start-up or
// use_isa chose one since.
Isa active_isa();
// Run the kernels on `isa` from now on; `source` names the flag or variable that asked, for the
// one-line usage error when this CPU lacks it.
void use_isa(Isa isa, std::string_view source = "--isa");
// use_isa by name ("avx2"); a name that is not an ISA is a usage error naming `source`.
void use_isa(std::string_view name, std::string_view source = "--isa");

// The help text of --isa: the names and the default here.
std::string isa_help();

// Sets an ISA for a scope and puts the previous one back (tests).
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) : previous_(active_isa()) { use_isa(isa); }
  ~ScopedIsa() { use_isa(previous_); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  Isa previous_;
};

}  // namespace flashbench::cpu
