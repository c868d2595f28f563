#include "flashbench/result.hpp"

namespace flashbench {

std::string_view to_string(Status status) {
  switch (status) {
    case Status::ok: return "ok";
    case Status::skipped: return "skipped";
    case Status::oom: return "oom";
    case Status::failed: return "failed";
  }
  return "?";
}

namespace {
double tflops(double flop, const TimingSummary& t) {
  return t.median_ms > 0 ? flop / (t.median_ms * 1e-3) / 1e12 : 0.0;
}
}  // namespace

double Row::fwd_tflops() const { return tflops(problem.forward_flop(), fwd); }
double Row::bwd_tflops() const { return tflops(problem.backward_flop(), bwd); }

}  // namespace flashbench
