#include "flashbench/harness/ring.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"

namespace flashbench {

class InProcessRing::Endpoint final : public RingTransport {
 public:
  Endpoint(InProcessRing& ring, int64_t rank) : ring_(ring), rank_(rank) {}
  int64_t rank() const override { return rank_; }
  int64_t ranks() const override { return ring_.ranks(); }
  int64_t sent_bytes() const override { return sent_bytes_; }

  void shift(std::span<const std::byte> outgoing, std::span<std::byte> incoming) override {
    const int64_t P = ring_.ranks();
    std::unique_lock lock(ring_.mutex_);
    ring_.outgoing_[size_t(rank_)] = outgoing;
    ring_.arrive_and_wait(lock);  // every rank's outgoing is posted
    const std::span<const std::byte> from = ring_.outgoing_[size_t((rank_ + P - 1) % P)];
    const bool sizes_agree = from.size() == incoming.size() && outgoing.size() == incoming.size();
    if (sizes_agree) {
      lock.unlock();  // the copies of different ranks touch different buffers
      if (!from.empty()) std::memcpy(incoming.data(), from.data(), from.size());
      lock.lock();
      sent_bytes_ += int64_t(outgoing.size());
    }
    // Nobody may overwrite its outgoing buffer before its successor has copied it; a rank whose sizes
    // disagree still arrives, so that the others are not left waiting for it.
    ring_.arrive_and_wait(lock);
    if (!sizes_agree)
      throw RuntimeFailure(fmt::format("ring: rank {} shifts {} bytes out and {} in, rank {} sends {}", rank_,
                                       outgoing.size(), incoming.size(), (rank_ + P - 1) % P, from.size()));
  }

 private:
  InProcessRing& ring_;
  int64_t rank_;
  int64_t sent_bytes_ = 0;
};

InProcessRing::InProcessRing(int64_t ranks) {
  if (ranks < 1) throw UsageError(fmt::format("a ring needs at least 1 rank, not {}", ranks));
  outgoing_.resize(size_t(ranks));
  for (int64_t r = 0; r < ranks; ++r) endpoints_.push_back(std::make_unique<Endpoint>(*this, r));
}

InProcessRing::~InProcessRing() = default;

RingTransport& InProcessRing::endpoint(int64_t rank) { return *endpoints_.at(size_t(rank)); }

void InProcessRing::arrive_and_wait(std::unique_lock<std::mutex>& lock) {
  if (failed_) throw RuntimeFailure("ring: another rank failed");
  const int64_t generation = generation_;
  if (++arrived_ == ranks()) {
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
    return;
  }
  changed_.wait(lock, [&] { return generation_ != generation || failed_ || finished_ > 0; });
  if (generation_ != generation) return;
  throw RuntimeFailure(failed_ ? "ring: another rank failed"
                               : "ring: a rank finished while this one shifts (the ranks' schedules disagree)");
}

void InProcessRing::run(const std::function<void(RingTransport&)>& body) {
  {
    const std::lock_guard lock(mutex_);
    failed_ = false;
    arrived_ = 0;
    finished_ = 0;
  }
  std::vector<std::exception_ptr> errors(endpoints_.size());
  std::exception_ptr first;
  std::mutex first_mutex;
  std::vector<std::thread> threads;
  for (size_t r = 0; r < endpoints_.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        body(*endpoints_[r]);
        const std::lock_guard lock(mutex_);
        ++finished_;
        changed_.notify_all();
      } catch (...) {
        {
          const std::lock_guard lock(first_mutex);
          if (!first) first = std::current_exception();
        }
        const std::lock_guard lock(mutex_);
        failed_ = true;
        changed_.notify_all();
      }
    });
  for (std::thread& thread : threads) thread.join();
  if (first) std::rethrow_exception(first);
}

std::vector<float> gather_rows(std::span<const float> global, int64_t seq, int64_t head_dim,
                               const std::vector<RowRange>& rows) {
  const int64_t heads = int64_t(global.size()) / (seq * head_dim);
  int64_t n = 0;
  for (const RowRange& range : rows) n += range.size();
  std::vector<float> local(size_t(heads * n * head_dim));
  for (int64_t h = 0; h < heads; ++h) {
    float* out = local.data() + h * n * head_dim;
    for (const RowRange& range : rows) {
      const float* in = global.data() + (h * seq + range.begin) * head_dim;
      out = std::copy_n(in, range.size() * head_dim, out);
    }
  }
  return local;
}

void place_rows(std::span<const float> local, int64_t seq, int64_t head_dim, const std::vector<RowRange>& rows,
                std::span<float> global) {
  const int64_t heads = int64_t(global.size()) / (seq * head_dim);
  int64_t n = 0;
  for (const RowRange& range : rows) n += range.size();
  for (int64_t h = 0; h < heads; ++h) {
    const float* in = local.data() + h * n * head_dim;
    for (const RowRange& range : rows) {
      std::copy_n(in, range.size() * head_dim, global.data() + (h * seq + range.begin) * head_dim);
      in += range.size() * head_dim;
    }
  }
}

}  // namespace flashbench
