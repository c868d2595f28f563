#pragma once
// The ring of context parallelism (model.hpp, "context parallelism"; docs/ring.md): P ranks, each
// holding its rows of the sequence, passing blocks to the next rank and receiving from the previous
// one. RingTransport is what a rank sees of the ring; InProcessRing runs P ranks as threads of one
// process, exchanging buffers by copy, for the CPU and the tests.
//
// A transport between processes (NCCL, one process per GPU) would implement the same interface:
// shift() is one ncclGroupStart / ncclSend(to rank+1) / ncclRecv(from rank-1) / ncclGroupEnd on the
// rank's stream, followed by a stream synchronisation (or an event the next step waits on, to
// overlap the transfer with the step's compute); the communicator comes from ncclCommInitRank with a
// unique id handed out by rank 0, and libnccl is opened with dlopen so that a build without it
// still runs. None of that exists yet: only the in-process transport below.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "flashbench/model/model.hpp"

namespace flashbench {

class RingTransport {
 public:
  virtual ~RingTransport() = default;
  virtual int64_t rank() const = 0;   // r, 0..P-1
  virtual int64_t ranks() const = 0;  // P
  // Sends `outgoing` to rank r+1 and receives rank r-1's outgoing into `incoming` (ranks modulo P).
  // Every rank calls it at the same point of its schedule with the same number of bytes; it returns
  // when this rank's send and receive are both complete. The two spans must not overlap. Throws
  // RuntimeFailure when the ranks disagree on the size or another rank failed.
  virtual void shift(std::span<const std::byte> outgoing, std::span<std::byte> incoming) = 0;
  virtual int64_t sent_bytes() const = 0;  // by this rank since it was made [bytes]
};

// P ranks in one process. run() starts one thread per rank and gives each its endpoint; shift()
// meets the other ranks at a barrier, copies the previous rank's outgoing bytes into the caller's
// incoming, and meets them again before any rank may reuse its outgoing buffer.
class InProcessRing {
 public:
  explicit InProcessRing(int64_t ranks);  // throws UsageError for ranks < 1
  ~InProcessRing();
  InProcessRing(const InProcessRing&) = delete;
  InProcessRing& operator=(const InProcessRing&) = delete;

  int64_t ranks() const { return int64_t(endpoints_.size()); }
  // Runs body(rank's transport) on P threads and waits for all of them. When one throws, the others
  // are released from any shift with a RuntimeFailure, and the first exception thrown is rethrown
  // here. A ring may be run more than once; sent_bytes() keeps counting.
  void run(const std::function<void(RingTransport&)>& body);
  RingTransport& endpoint(int64_t rank);

 private:
  class Endpoint;
  friend class Endpoint;

  // Waits until every rank has arrived (the generation advances); throws when a rank failed or
  // finished without arriving (the ranks' schedules disagree).
  void arrive_and_wait(std::unique_lock<std::mutex>& lock);

  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t arrived_ = 0;
  int64_t generation_ = 0;
  bool failed_ = false;
  int64_t finished_ = 0;  // ranks whose body returned: a shift still waiting for them never completes
  std::vector<std::span<const std::byte>> outgoing_;  // what each rank offers at the current shift
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
};

// A rank's rows of a [BH, N, d] host tensor: per head, the rows `rows` lists, in that order, giving
// [BH, n, d] (n the ranges' total); place_rows writes them back. Shapes from the arguments:
// global.size() = BH·N·d.
std::vector<float> gather_rows(std::span<const float> global, int64_t seq, int64_t head_dim,
                               const std::vector<RowRange>& rows);
void place_rows(std::span<const float> local, int64_t seq, int64_t head_dim, const std::vector<RowRange>& rows,
                std::span<float> global);

}  // namespace flashbench
