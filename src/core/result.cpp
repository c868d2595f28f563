#include "flashbench/core/result.hpp"

#include <algorithm>
#include <cmath>

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
template <class Reference>
double relative_error(std::span<const float> x, std::span<const Reference> ref, double scale_if_zero) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double diff = std::fabs(double(x[i]) - double(ref[i]));
    max_diff = std::isnan(diff) ? INFINITY : std::max(max_diff, diff);
    max_ref = std::max(max_ref, std::fabs(double(ref[i])));
  }
  if (max_ref > 0) return max_diff / max_ref;
  return scale_if_zero > 0 ? max_diff / scale_if_zero : max_diff;
}
}  // namespace

double max_relative_error(std::span<const float> x, std::span<const float> ref, double scale_if_zero) {
  return relative_error(x, ref, scale_if_zero);
}
double max_relative_error(std::span<const float> x, std::span<const double> ref, double scale_if_zero) {
  return relative_error(x, ref, scale_if_zero);
}
double max_abs(std::span<const double> ref) {
  double largest = 0;
  for (double value : ref) largest = std::max(largest, std::fabs(value));
  return largest;
}

std::string Row::implementation() const { return impl.empty() ? std::string(to_string(variant)) : impl; }

namespace {
double tflops(double flop, const TimingSummary& t) {
  return t.median_ms > 0 ? flop / (t.median_ms * 1e-3) / 1e12 : 0.0;
}
}  // namespace

double Row::fwd_tflops() const { return tflops(problem.forward_flop(), fwd); }
double Row::bwd_tflops() const { return tflops(problem.backward_flop(), bwd); }

namespace {
std::optional<double> of_peak(double tflops, std::optional<double> peak_gflops) {
  if (!peak_gflops || *peak_gflops <= 0 || tflops <= 0) return std::nullopt;
  return tflops * 1e3 / *peak_gflops;
}
}  // namespace

std::optional<double> Row::fwd_of_peak() const { return of_peak(fwd_tflops(), peak_gflops); }
std::optional<double> Row::bwd_of_peak() const { return of_peak(bwd_tflops(), peak_gflops); }

}  // namespace flashbench
