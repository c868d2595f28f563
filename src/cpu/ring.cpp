// v2 as ring attention on the CPU: the schedule of cpu/ring.hpp over the fp32 kernels of
// attention.cpp, every buffer the model counts (model_context_parallel) allocated as it counts it.
#include "flashbench/cpu/ring.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"
#include "flashbench/cpu/isa.hpp"

namespace flashbench::cpu {
namespace {

// Which keys of chunk `k` the queries of chunk `q` see (global rows).
enum class Sight { none, diagonal, full };

Sight sight(const RowRange& q, const RowRange& k, bool causal) {
  if (!causal || k.end <= q.begin) return Sight::full;
  if (k.begin >= q.end) return Sight::none;
  if (k.begin == q.begin && k.end == q.end) return Sight::diagonal;
  throw RuntimeFailure(fmt::format("ring: query rows [{}, {}) and key rows [{}, {}) overlap partly", q.begin, q.end,
                                   k.begin, k.end));
}

int64_t total_rows(const std::vector<RowRange>& ranges) {
  int64_t n = 0;
  for (const RowRange& range : ranges) n += range.size();
  return n;
}

}  // namespace

RingStepPlan plan_ring_step(const std::vector<RowRange>& queries, const std::vector<RowRange>& keys, bool causal) {
  const int64_t n_queries = total_rows(queries), n_keys = total_rows(keys);
  bool all_full = true, all_none = true, local_causal = queries.size() == keys.size();
  for (size_t i = 0; i < queries.size(); ++i)
    for (size_t j = 0; j < keys.size(); ++j) {
      const Sight seen = sight(queries[i], keys[j], causal);
      all_full = all_full && seen == Sight::full;
      all_none = all_none && seen == Sight::none;
      // The kernel's own causal mask over the stored order: chunk i sees chunks j < i whole, its own
      // diagonally, none after it. It holds when chunks have equal lengths.
      const Sight stored = j < i ? Sight::full : j == i ? Sight::diagonal : Sight::none;
      local_causal = local_causal && seen == stored && queries[i].size() == keys[j].size();
    }
  RingStepPlan plan;
  if (all_none) return plan;
  if (all_full || local_causal) {
    plan.all_heads = true;
    plan.calls.push_back({0, n_queries, 0, n_keys, !all_full});
    return plan;
  }
  // Chunk by chunk: the keys a query chunk sees must be consecutive in storage, all whole but the
  // last, which may be its diagonal (the kernel's bottom-right mask).
  int64_t query_begin = 0;
  for (const RowRange& q : queries) {
    int64_t key_begin = 0, first = -1, end = 0;
    bool diagonal_seen = false;
    for (const RowRange& k : keys) {
      const Sight seen = sight(q, k, causal);
      if (seen != Sight::none) {
        if (diagonal_seen || (first >= 0 && end != key_begin))
          throw RuntimeFailure("ring: the keys a query chunk sees are not one kernel call's");
        if (first < 0) first = key_begin;
        end = key_begin + k.size();
        diagonal_seen = seen == Sight::diagonal;
      }
      key_begin += k.size();
    }
    if (first >= 0) plan.calls.push_back({query_begin, q.size(), first, end - first, diagonal_seen});
    query_begin += q.size();
  }
  return plan;
}

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::span<const std::byte> bytes_of(const float* data, int64_t count) {
  return {reinterpret_cast<const std::byte*>(data), size_t(count) * sizeof(float)};
}
std::span<std::byte> bytes_of(float* data, int64_t count) {
  return {reinterpret_cast<std::byte*>(data), size_t(count) * sizeof(float)};
}

class RingV2 final : public Implementation {
 public:
  RingV2(const Problem& problem, RingTransport& transport, Tiling tiling)
      : problem_(problem), transport_(transport), tiling_(tiling) {
    validate_context_parallel(problem_, transport_.ranks());
    validate(tiling_);
    for (int64_t rank = 0; rank < transport_.ranks(); ++rank)
      rows_.push_back(local_rows(problem_.seq, transport_.ranks(), rank, seq_split(problem_)));
  }

  std::string_view name() const override { return "v2.ring"; }
  Variant variant() const override { return Variant::v2; }
  std::string_view summary() const override { return "v2 as ring attention over P ranks (context parallelism)"; }
  void annotate(Row& row) const override { row.isa = isa_name(active_isa()); }

  std::optional<std::string> unsupported(const Problem& local) const override {
    if (local.dtype != Dtype::fp32) return std::string("the CPU ring runs fp32 storage only");
    if (!same_problem(local, local_problem(problem_, transport_.ranks())))
      return fmt::format("a rank's problem is the ring's local one ({}), not {}",
                         local_problem(problem_, transport_.ranks()).describe(), local.describe());
    return std::nullopt;
  }

  // One step's: the local problem's workspace of the v2 kernels. No gradient buffers beside the
  // stack's dQ, dK, dV, which hold each step's shares as the kernel writes them. The ring's own
  // buffers are the model's ring terms (ring_bytes), which model_context_parallel adds.
  LayerCosts costs(const Problem& local, const ModelParams& params) const override {
    const LayerShape shape = LayerShape::of(local);
    constexpr int64_t kFloat = 4;
    return {.forward_workspace_bytes = workspace_elements(Variant::v2, Pass::forward, shape, tiling_, params.threads) * kFloat,
            .backward_workspace_bytes = workspace_elements(Variant::v2, Pass::backward, shape, tiling_, params.threads) * kFloat,
            .backward_extra_grad_bytes = 0};
  }

  void forward(LayerCall& call, const LayerInputs& in, void* O_raw, KeptTensors& kept) override {
    require_supported(call.problem);
    const Problem& local = call.problem;
    const int64_t P = transport_.ranks(), r = transport_.rank();
    const int64_t elements = local.q_elements(), rows = local.row_elements();
    const float* Q = static_cast<const float*>(in.Q);
    if (P == 1) {  // no ring: the one-device v2, as the model's P = 1 is model_memory's
      KeptView view;
      view.lse = kept.get<float>("LSE");
      cpu::forward(Variant::v2, LayerShape::of(local), tiling_, Q, static_cast<const float*>(in.K),
                   static_cast<const float*>(in.V), static_cast<float*>(O_raw), view, call.space);
      return;
    }
    // The model's forward ring terms (ring_bytes), all held before the first step so that step 0's
    // kernel workspace meets them: min(2, P − 1) K, V block pairs, one step's O and LSE, the running
    // O and LSE (tag workspace).
    std::vector<BlockPair> pairs = allocate_pairs(call.space, P, elements);
    Buffer<float> O_step(call.space, Tag::workspace, elements), lse_step(call.space, Tag::workspace, rows);
    Buffer<float> O_run(call.space, Tag::workspace, elements), lse_run(call.space, Tag::workspace, rows);
    std::fill_n(O_run.data(), elements, 0.0f);
    std::fill_n(lse_run.data(), rows, kNegInf);

    // Step 0: its own rows of K and V.
    const float* K = static_cast<const float*>(in.K);
    const float* V = static_cast<const float*>(in.V);
    for (int64_t s = 0; s < P; ++s) {
      BlockPair* incoming = s < P - 1 ? &pairs[size_t(s % 2)] : nullptr;
      // The pair goes on before this step's compute: the transfer a device would overlap with it.
      if (incoming) {
        transport_.shift(bytes_of(K, elements), bytes_of(incoming->K.data(), elements));
        transport_.shift(bytes_of(V, elements), bytes_of(incoming->V.data(), elements));
      }
      const RingStepPlan plan = plan_ring_step(rows_[size_t(r)], rows_[size_t((r - s + P) % P)], problem_.causal);
      for_each_call(local, plan, [&](const RingStepCall& c, int64_t head, int64_t heads) {
        const LayerShape shape = step_shape(local, c, heads);
        const int64_t q = head * local.seq + c.query_begin, k = head * local.seq + c.key_begin;
        const int64_t d = local.head_dim;
        KeptView step_kept;
        step_kept.lse = lse_step.data() + q;
        cpu::forward(Variant::v2, shape, tiling_, Q + q * d, K + k * d, V + k * d, O_step.data() + q * d, step_kept,
                     call.space);
        // An all-heads call spans whole heads (query_rows = n), so its rows are consecutive too.
        merge(local, q, heads * c.query_rows, O_step.data(), lse_step.data(), O_run.data(), lse_run.data());
      });
      if (incoming) {
        K = incoming->K.data();
        V = incoming->V.data();
      }
    }
    std::copy_n(O_run.data(), elements, static_cast<float*>(O_raw));
    std::copy_n(lse_run.data(), rows, kept.get<float>("LSE"));
  }

  void backward(LayerCall& call, const LayerInputs& in, const void* O_raw, const void* dO_raw, KeptTensors& kept,
                const LayerGradients& gradients) override {
    require_supported(call.problem);
    const Problem& local = call.problem;
    const int64_t P = transport_.ranks(), r = transport_.rank(), d = local.head_dim;
    const int64_t elements = local.q_elements();
    const float* Q = static_cast<const float*>(in.Q);
    const float* O = static_cast<const float*>(O_raw);
    const float* dO = static_cast<const float*>(dO_raw);
    const float* lse = kept.get<float>("LSE");
    // The layer's gradients; until the last step each holds the step's share as the kernel writes it.
    float* dQ = static_cast<float*>(gradients.dQ);
    float* dK = static_cast<float*>(gradients.dK);
    float* dV = static_cast<float*>(gradients.dV);
    if (P == 1) {
      KeptView view;
      view.lse = const_cast<float*>(lse);
      cpu::backward(Variant::v2, LayerShape::of(local), tiling_, Q, static_cast<const float*>(in.K),
                    static_cast<const float*>(in.V), O, dO, view, dQ, dK, dV, call.space);
      return;
    }
    // The model's backward ring terms (tag workspace): min(2, P − 1) K, V block pairs, two dK sums and
    // two dV sums (the ones worked on and the ones arriving), the dQ sum.
    std::vector<BlockPair> pairs = allocate_pairs(call.space, P, elements);
    BlockPair sums[2] = {BlockPair(call.space, elements), BlockPair(call.space, elements)};  // .K: dK, .V: dV
    Buffer<float> dQ_sum(call.space, Tag::workspace, elements);
    std::fill_n(sums[0].K.data(), elements, 0.0f);
    std::fill_n(sums[0].V.data(), elements, 0.0f);
    std::fill_n(dQ_sum.data(), elements, 0.0f);

    const float* K = static_cast<const float*>(in.K);
    const float* V = static_cast<const float*>(in.V);
    for (int64_t s = 0; s < P; ++s) {
      BlockPair* incoming = s < P - 1 ? &pairs[size_t(s % 2)] : nullptr;
      if (incoming) {
        transport_.shift(bytes_of(K, elements), bytes_of(incoming->K.data(), elements));
        transport_.shift(bytes_of(V, elements), bytes_of(incoming->V.data(), elements));
      }
      // dK and dV of the pair in hand, from the ranks it has visited.
      float* dK_sum = sums[s % 2].K.data();
      float* dV_sum = sums[s % 2].V.data();
      const RingStepPlan plan = plan_ring_step(rows_[size_t(r)], rows_[size_t((r - s + P) % P)], problem_.causal);
      for_each_call(local, plan, [&](const RingStepCall& c, int64_t head, int64_t heads) {
        const LayerShape shape = step_shape(local, c, heads);
        const int64_t q = head * local.seq + c.query_begin, k = head * local.seq + c.key_begin;
        KeptView step_kept;
        step_kept.lse = const_cast<float*>(lse) + q;  // read only by backward
        cpu::backward(Variant::v2, shape, tiling_, Q + q * d, K + k * d, V + k * d, O + q * d, dO + q * d, step_kept,
                      dQ + q * d, dK + k * d, dV + k * d, call.space);
        // Only the rows this call wrote (an all-heads call spans whole heads, so they are consecutive).
        add(dQ_sum.data() + q * d, dQ + q * d, heads * c.query_rows * d);
        add(dK_sum + k * d, dK + k * d, heads * c.key_rows * d);
        add(dV_sum + k * d, dV + k * d, heads * c.key_rows * d);
      });
      // The sums go on with their pair; the P-th send, after the last step, brings them home to the
      // pair's owner, into the layer's dK and dV (whose last step's shares are summed by then).
      float* next_dK = s < P - 1 ? sums[(s + 1) % 2].K.data() : dK;
      float* next_dV = s < P - 1 ? sums[(s + 1) % 2].V.data() : dV;
      transport_.shift(bytes_of(dK_sum, elements), bytes_of(next_dK, elements));
      transport_.shift(bytes_of(dV_sum, elements), bytes_of(next_dV, elements));
      if (incoming) {
        K = incoming->K.data();
        V = incoming->V.data();
      }
    }
    std::copy_n(dQ_sum.data(), elements, dQ);
  }

 private:
  void require_supported(const Problem& local) const {
    if (const auto reason = unsupported(local)) throw RuntimeFailure("ring: " + *reason);
  }

  // The kernel's shape of one call: `heads` heads (all of them, or one), its query and key rows.
  static LayerShape step_shape(const Problem& local, const RingStepCall& c, int64_t heads) {
    LayerShape shape = LayerShape::of(local);
    shape.heads_total = heads;
    shape.seq = c.query_rows;
    shape.keys = c.key_rows;
    shape.causal = c.causal;
    return shape;
  }

  // fn(call, first head, heads) for each kernel call of `plan`: once over all heads, or per head.
  template <class Fn>
  static void for_each_call(const Problem& local, const RingStepPlan& plan, Fn&& fn) {
    for (const RingStepCall& c : plan.calls) {
      if (plan.all_heads) {
        fn(c, 0, local.heads_total());
        continue;
      }
      for (int64_t h = 0; h < local.heads_total(); ++h) fn(c, h, 1);
    }
  }

  // The online softmax across blocks, over `count` rows from row q (flattened [BH·n] index):
  // LSE' = m + log(e^(LSE − m) + e^(LSE_s − m)) with m the larger, O' the two weighted accordingly.
  static void merge(const Problem& local, int64_t q, int64_t count, const float* O_step, const float* lse_step,
                    float* O_run, float* lse_run) {
    const int64_t d = local.head_dim;
    for (int64_t i = q; i < q + count; ++i) {
      const float m = std::max(lse_run[i], lse_step[i]);
      const float kept_weight = std::exp(lse_run[i] - m), step_weight = std::exp(lse_step[i] - m);
      const float total = kept_weight + step_weight;
      for (int64_t k = 0; k < d; ++k)
        O_run[i * d + k] = (kept_weight * O_run[i * d + k] + step_weight * O_step[i * d + k]) / total;
      lse_run[i] = m + std::log(total);
    }
  }

  // into += a
  static void add(float* into, const float* a, int64_t count) {
    for (int64_t e = 0; e < count; ++e) into[e] += a[e];
  }

  // A K, V block pair [BH, n, d] (tag workspace): one in flight, or a pair of dK, dV sums.
  struct BlockPair {
    BlockPair(MemorySpace& space, int64_t elements) : K(space, Tag::workspace, elements), V(space, Tag::workspace, elements) {}
    Buffer<float> K, V;
  };
  // The pairs in flight: min(2, P − 1), the one worked on (from step 1) and the one arriving; at
  // P = 2 step 0 works on its own K and V and step 1 receives nothing.
  static std::vector<BlockPair> allocate_pairs(MemorySpace& space, int64_t P, int64_t elements) {
    std::vector<BlockPair> pairs;
    pairs.reserve(2);
    for (int64_t b = 0; b < std::min<int64_t>(2, P - 1); ++b) pairs.emplace_back(space, elements);
    return pairs;
  }

  Problem problem_;
  RingTransport& transport_;
  Tiling tiling_;
  std::vector<std::vector<RowRange>> rows_;  // rows_[rank]: its global rows in storage order
};

}  // namespace

std::unique_ptr<Implementation> make_ring_v2(const Problem& problem, RingTransport& transport, Tiling tiling) {
  return std::make_unique<RingV2>(problem, transport, tiling);
}

}  // namespace flashbench::cpu
