#include "flashbench/cpu/threads.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace flashbench::cpu {

int bounded_thread_count(int requested, std::string_view flag) {
  const int hardware = std::max(1, omp_get_num_procs());  // the CPUs of this process's affinity mask
  const bool from_flag = requested > 0;
  const int wanted = from_flag ? requested : omp_get_max_threads();
  if (wanted <= hardware) return wanted;
  fmt::print(stderr, "warning: {} {} is more than the {} hardware threads here: using {}\n",
             from_flag ? flag : std::string_view("OMP_NUM_THREADS ="), wanted, hardware, hardware);
  return hardware;
}

}  // namespace flashbench::cpu
