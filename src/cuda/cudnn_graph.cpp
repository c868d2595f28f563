// The forward and backward attention graphs in cuDNN's backend API (cudnn_graph.hpp).
//
// cuDNN 9 runs scaled dot-product attention as a fused flash-attention kernel when an operation
// graph has the shape its engines recognise; the graphs below are that shape (as cuDNN's
// documentation of fused attention and its frontend library describe it): every intermediate is a
// virtual tensor (never in memory), scores and their derivatives in fp32, the probabilities handed
// to the second product in the storage dtype.
#include "cudnn_graph.hpp"

#include <array>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "flashbench/core/errors.hpp"

namespace flashbench::cuda {

namespace {

// A cuDNN call that failed, with its status (whose category says "not supported" or not).
struct CudnnError : RuntimeFailure {
  CudnnError(const std::string& what, cudnnStatus_t status) : RuntimeFailure(what), status(status) {}
  cudnnStatus_t status;
};

void check(const CudnnLibrary& library, cudnnStatus_t status, const std::string& what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw CudnnError(fmt::format("cuDNN {} failed: {}", what, library.describe(status)), status);
}

bool not_supported(cudnnStatus_t status) { return CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED; }

// One backend descriptor, destroyed with its owner.
class Descriptor {
 public:
  Descriptor(const CudnnLibrary& library, cudnnBackendDescriptorType_t type) : library_(&library) {
    check(library, library.create_descriptor(type, &descriptor_), fmt::format("creating descriptor type {}", int(type)));
  }
  Descriptor(Descriptor&& other) noexcept
      : library_(other.library_), descriptor_(std::exchange(other.descriptor_, nullptr)) {}
  Descriptor& operator=(Descriptor&&) = delete;
  Descriptor(const Descriptor&) = delete;
  ~Descriptor() {
    if (descriptor_) library_->destroy_descriptor(descriptor_);
  }

  cudnnBackendDescriptor_t get() const { return descriptor_; }

  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                  const void* values) {
    check(*library_, library_->set_attribute(descriptor_, name, type, count, values),
          fmt::format("setting attribute {}", int(name)));
    return *this;
  }
  template <class T>
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T& value) {
    return set(name, type, 1, &value);
  }
  Descriptor& set(cudnnBackendAttributeName_t name, const Descriptor& value) {
    const cudnnBackendDescriptor_t raw = value.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  void finalize(const std::string& what) { check(*library_, library_->finalize(descriptor_), "finalizing " + what); }

 private:
  const CudnnLibrary* library_;
  cudnnBackendDescriptor_t descriptor_ = nullptr;
};

using Dims = std::array<int64_t, 4>;

// Row-major strides of `dims`. [elements]
Dims packed(const Dims& dims) { return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}; }

// The strides that show a row-major [.., .., rows, cols] tensor as its transpose [.., .., cols, rows].
Dims transposed(const Dims& row_major_dims) {
  const Dims s = packed(row_major_dims);
  return {s[0], s[1], 1, row_major_dims[3]};
}

// The handle of an operation graph and of an execution plan. cuDNN 9.19 marks these attributes
// deprecated in favour of a device-properties descriptor that older 9.x releases lack; they are the
// ones every cuDNN 9 accepts.
void set_handle(Descriptor& descriptor, cudnnBackendAttributeName_t name, cudnnHandle_t handle) {
  descriptor.set(name, CUDNN_TYPE_HANDLE, handle);
}
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

// Tensors are numbered by Bind when the caller binds them, from here on when virtual.
constexpr int64_t kFirstVirtualId = 100;

// Builds one operation graph, then its execution plan. Tensors are named by their id.
class GraphBuilder {
 public:
  GraphBuilder(const CudnnLibrary& library, const AttentionShape& shape)
      : library_(library),
        io_(shape.dtype == Dtype::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF),
        qkv_{shape.batch, shape.heads, shape.seq, shape.head_dim},
        qkv_t_{shape.batch, shape.heads, shape.head_dim, shape.seq},
        scores_{shape.batch, shape.heads, shape.seq, shape.seq},
        rows_{shape.batch, shape.heads, shape.seq, 1} {}

  cudnnDataType_t io() const { return io_; }
  const Dims& qkv() const { return qkv_; }
  const Dims& scores() const { return scores_; }
  const Dims& rows() const { return rows_; }

  // A tensor the caller binds, row-major unless `strides` says otherwise.
  int64_t bound(Bind id, const Dims& dims, cudnnDataType_t type) { return bound(id, dims, packed(dims), type); }
  int64_t bound(Bind id, const Dims& dims, const Dims& strides, cudnnDataType_t type) {
    return tensor(int64_t(id), dims, strides, type, false, false);
  }
  // A row-major [B,H,N,d] tensor seen as its transpose [B,H,d,N], the layout cuDNN's attention graphs take K (and Vᵀ) in.
  int64_t bound_transposed(Bind id) { return bound(id, qkv_t_, transposed(qkv_), io_); }
  // A float scalar passed by value (the caller binds a host pointer).
  int64_t scalar(Bind id) { return tensor(int64_t(id), {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, true); }
  int64_t intermediate(const Dims& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return intermediate(dims, packed(dims), type);
  }
  int64_t intermediate(const Dims& dims, const Dims& strides, cudnnDataType_t type) {
    return tensor(next_virtual_++, dims, strides, type, true, false);
  }

  // y = mode(x[, b[, t]]) elementwise with broadcasting, computed in `precision`.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t y,
                 cudnnDataType_t precision = CUDNN_DATA_FLOAT, int64_t t = 0, int64_t axis = -1) {
    Descriptor& operation_mode = keep(Descriptor(library_, CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
    operation_mode.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode);
    operation_mode.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, precision);
    if (axis >= 0) operation_mode.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, axis);
    operation_mode.finalize("a pointwise descriptor");
    Descriptor operation(library_, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    operation.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, operation_mode);
    operation.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, at(x));
    if (b) operation.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, at(b));
    if (t) operation.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, at(t));
    operation.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, at(y));
    add_operation(std::move(operation), "a pointwise operation");
  }
  int64_t pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, const Dims& dims) {
    const int64_t y = intermediate(dims);
    pointwise(mode, x, b, y);
    return y;
  }

  // c = a·b, batched over the two leading dimensions, accumulated in fp32.
  void matmul(int64_t a, int64_t b, int64_t c) {
    Descriptor& product = keep(Descriptor(library_, CUDNN_BACKEND_MATMUL_DESCRIPTOR));
    product.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    product.finalize("a matmul descriptor");
    Descriptor operation(library_, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    operation.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, at(a));
    operation.set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, at(b));
    operation.set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, at(c));
    operation.set(CUDNN_ATTR_OPERATION_MATMUL_DESC, product);
    add_operation(std::move(operation), "a matmul operation");
  }

  // y = the reduction of x over the dimensions where y has extent 1, in fp32.
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y) {
    Descriptor& reduce = keep(Descriptor(library_, CUDNN_BACKEND_REDUCTION_DESCRIPTOR));
    reduce.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, op);
    reduce.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    reduce.finalize("a reduction descriptor");
    Descriptor operation(library_, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    operation.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, at(x));
    operation.set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, at(y));
    operation.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, reduce);
    add_operation(std::move(operation), "a reduction operation");
  }

  // y = x seen through y's dimensions and strides (a transpose, no data moved).
  void reshape(int64_t x, int64_t y) {
    Descriptor operation(library_, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    operation.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, at(x));
    operation.set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, at(y));
    add_operation(std::move(operation), "a reshape operation");
  }

  // Scores with the entries above the diagonal (key j > query i) replaced by the bound `masked`
  // value, so that exp gives 0 there: keep = (row index ≥ column index).
  int64_t causal_mask(int64_t scores) {
    const int64_t row = intermediate(scores_, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, 0, row, CUDNN_DATA_INT32, 0, 2);
    const int64_t column = intermediate(scores_, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, 0, column, CUDNN_DATA_INT32, 0, 3);
    const int64_t keep = intermediate(scores_, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_GE, row, column, keep, CUDNN_DATA_BOOLEAN);
    const int64_t masked_value = scalar(Bind::masked);
    const int64_t masked = intermediate(scores_);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, masked_value, masked, CUDNN_DATA_FLOAT, keep);
    return masked;
  }

  // The graph of every operation added, its engines by cuDNN's heuristics, and the first engine
  // configuration that finalises into a plan; or why there is none.
  PlanOrReason finish(cudnnHandle_t handle, const char* which) {
    Descriptor& graph = keep(Descriptor(library_, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
    set_handle(graph, kGraphHandle, handle);
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const Descriptor* operation : operations_) raw.push_back(operation->get());
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(raw.size()), raw.data());
    std::string last_refusal;
    try {
      graph.finalize(fmt::format("the {} operation graph", which));
      for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
        Descriptor& heuristics = keep(Descriptor(library_, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
        heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
        heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
        try {
          heuristics.finalize("the engine heuristics");
        } catch (const CudnnError& e) {
          if (!not_supported(e.status)) throw;
          last_refusal = e.what();
          continue;
        }
        int64_t offered = 0;
        check(library_,
              library_.get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                     &offered, nullptr),
              "counting the heuristics' engine configurations");
        std::vector<cudnnBackendDescriptor_t> configurations;
        for (int64_t i = 0; i < offered; ++i)
          configurations.push_back(keep(Descriptor(library_, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)).get());
        int64_t returned = 0;
        check(library_,
              library_.get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                     offered, &returned, configurations.data()),
              "reading the heuristics' engine configurations");
        for (int64_t i = 0; i < returned; ++i) {
          Descriptor& plan = keep(Descriptor(library_, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
          set_handle(plan, kPlanHandle, handle);
          plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configurations[i]);
          try {
            plan.finalize("an execution plan");
          } catch (const CudnnError& e) {
            last_refusal = e.what();  // this engine declines; the next may not
            continue;
          }
          int64_t workspace_bytes = 0, count = 0;
          check(library_,
                library_.get_attribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                       &count, &workspace_bytes),
                "reading the plan's workspace size");
          const cudnnBackendDescriptor_t raw_plan = plan.get();
          return {std::make_unique<AttentionPlan>(library_, std::make_shared<std::vector<Descriptor>>(take_all()),
                                                  raw_plan, workspace_bytes),
                  {}};
        }
      }
    } catch (const CudnnError& e) {
      if (!not_supported(e.status)) throw;
      last_refusal = e.what();
    }
    return {nullptr, fmt::format("cuDNN {} has no engine for this {} graph ({})", library_.version, which,
                                 last_refusal.empty() ? "its heuristics offered none" : last_refusal)};
  }

 private:
  int64_t tensor(int64_t id, const Dims& dims, const Dims& strides, cudnnDataType_t type, bool is_virtual,
                 bool by_value) {
    Descriptor descriptor(library_, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;  // [bytes] what cuDNN's attention kernels load with
    descriptor.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type);
    descriptor.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, int64_t(dims.size()), dims.data());
    descriptor.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, int64_t(strides.size()), strides.data());
    descriptor.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, id);
    descriptor.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, alignment);
    descriptor.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, is_virtual);
    if (by_value) descriptor.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, by_value);
    descriptor.finalize(fmt::format("tensor {}", id));
    tensors_.emplace(id, &keep(std::move(descriptor)));
    return id;
  }
  const Descriptor& at(int64_t id) const { return *tensors_.at(id); }
  Descriptor& keep(Descriptor descriptor) {
    owned_.push_back(std::make_unique<Descriptor>(std::move(descriptor)));
    return *owned_.back();
  }
  void add_operation(Descriptor operation, const char* what) {
    operation.finalize(what);
    operations_.push_back(&keep(std::move(operation)));
  }
  std::vector<Descriptor> take_all() {
    std::vector<Descriptor> all;
    all.reserve(owned_.size());
    for (auto& descriptor : owned_) all.push_back(std::move(*descriptor));
    owned_.clear();
    return all;
  }

  const CudnnLibrary& library_;
  cudnnDataType_t io_;
  Dims qkv_, qkv_t_, scores_, rows_;
  int64_t next_virtual_ = kFirstVirtualId;
  std::vector<std::unique_ptr<Descriptor>> owned_;  // every descriptor made, in order
  std::map<int64_t, const Descriptor*> tensors_;
  std::vector<const Descriptor*> operations_;
};

// S = scale·Q·Kᵀ [B,H,N,N] in fp32, masked when causal.
int64_t scaled_scores(GraphBuilder& g, const AttentionShape& shape, int64_t Q, int64_t K_t, int64_t scale) {
  const int64_t S = g.intermediate(g.scores());
  g.matmul(Q, K_t, S);
  const int64_t scaled = g.pointwise(CUDNN_POINTWISE_MUL, S, scale, g.scores());
  return shape.causal ? g.causal_mask(scaled) : scaled;
}

}  // namespace

AttentionShape AttentionShape::of(const Problem& problem) {
  return {problem.batch, problem.heads, problem.seq, problem.head_dim, problem.causal, problem.dtype, problem.scale()};
}

AttentionPlan::AttentionPlan(const CudnnLibrary& library, std::shared_ptr<void> descriptors,
                             cudnnBackendDescriptor_t plan, int64_t workspace_bytes)
    : library_(&library), descriptors_(std::move(descriptors)), plan_(plan), workspace_bytes_(workspace_bytes) {}

void AttentionPlan::execute(cudnnHandle_t handle, const std::vector<std::pair<Bind, void*>>& bindings,
                            void* workspace) const {
  std::vector<int64_t> ids;
  std::vector<void*> pointers;
  for (const auto& [id, pointer] : bindings) {
    ids.push_back(int64_t(id));
    pointers.push_back(pointer);
  }
  Descriptor pack(*library_, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(ids.size()), ids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(pointers.size()), pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize("the variant pack");
  check(*library_, library_->execute(handle, plan_, pack.get()), "executing the plan");
}

// Forward, the softmax with its statistics written out:
//   S = scale·Q·Kᵀ (masked)   m = rowmax S   E = exp(S − m)   z = rowsum E
//   Stats = m + log z         P = E / z (storage dtype)      O = P·V
PlanOrReason build_forward_plan(const CudnnLibrary& library, cudnnHandle_t handle, const AttentionShape& shape) {
  GraphBuilder g(library, shape);
  const int64_t Q = g.bound(Bind::Q, g.qkv(), g.io());
  const int64_t K_t = g.bound_transposed(Bind::K);
  const int64_t V = g.bound(Bind::V, g.qkv(), g.io());
  const int64_t scale = g.scalar(Bind::scale);
  const int64_t S = scaled_scores(g, shape, Q, K_t, scale);

  const int64_t row_max = g.intermediate(g.rows());
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, S, row_max);
  const int64_t centered = g.pointwise(CUDNN_POINTWISE_SUB, S, row_max, g.scores());
  const int64_t E = g.pointwise(CUDNN_POINTWISE_EXP, centered, 0, g.scores());
  const int64_t row_sum = g.intermediate(g.rows());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, E, row_sum);
  const int64_t log_sum = g.pointwise(CUDNN_POINTWISE_LOG, row_sum, 0, g.rows());
  const int64_t stats = g.bound(Bind::stats, g.rows(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_ADD, row_max, log_sum, stats);
  const int64_t P = g.intermediate(g.scores(), g.io());
  g.pointwise(CUDNN_POINTWISE_DIV, E, row_sum, P);

  const int64_t O = g.bound(Bind::O, g.qkv(), g.io());
  g.matmul(P, V, O);
  return g.finish(handle, "forward");
}

// Backward, P recomputed from the statistics (FlashAttention-2's recurrences):
//   D = rowsum(dO ∘ O) (written out: row_dot)    P = exp(S − Stats)
//   dV = Pᵀ·dO    dP = dO·Vᵀ    dS = scale · P ∘ (dP − D)
//   dK = dSᵀ·Q    dQ = dS·K (accumulated in fp32 in dQ_accum, then stored)
PlanOrReason build_backward_plan(const CudnnLibrary& library, cudnnHandle_t handle, const AttentionShape& shape) {
  GraphBuilder g(library, shape);
  const int64_t Q = g.bound(Bind::Q, g.qkv(), g.io());
  const int64_t K_t = g.bound_transposed(Bind::K);
  const int64_t V_t = g.bound_transposed(Bind::V);
  const int64_t O = g.bound(Bind::O, g.qkv(), g.io());
  const int64_t dO = g.bound(Bind::dO, g.qkv(), g.io());
  const int64_t stats = g.bound(Bind::stats, g.rows(), CUDNN_DATA_FLOAT);
  const int64_t scale = g.scalar(Bind::scale);
  const int64_t one = g.scalar(Bind::one);

  const int64_t dO_O = g.pointwise(CUDNN_POINTWISE_MUL, dO, O, g.qkv());
  const int64_t dot = g.intermediate(g.rows());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dO_O, dot);
  const int64_t D = g.bound(Bind::row_dot, g.rows(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, dot, one, D);

  const int64_t S = scaled_scores(g, shape, Q, K_t, scale);
  const int64_t centered = g.pointwise(CUDNN_POINTWISE_SUB, S, stats, g.scores());
  const int64_t P = g.pointwise(CUDNN_POINTWISE_EXP, centered, 0, g.scores());

  const int64_t P_t = g.intermediate(g.scores(), transposed(g.scores()), g.io());
  g.reshape(P, P_t);
  const int64_t dV = g.bound(Bind::dV, g.qkv(), g.io());
  g.matmul(P_t, dO, dV);

  const int64_t dP = g.intermediate(g.scores());
  g.matmul(dO, V_t, dP);
  const int64_t dP_kept = g.pointwise(CUDNN_POINTWISE_MUL, dP, one, g.scores());
  const int64_t dP_centered = g.pointwise(CUDNN_POINTWISE_SUB, dP_kept, D, g.scores());
  const int64_t dS_unscaled = g.pointwise(CUDNN_POINTWISE_MUL, dP_centered, P, g.scores());
  const int64_t dS = g.pointwise(CUDNN_POINTWISE_MUL, dS_unscaled, scale, g.scores());

  const int64_t dS_t = g.intermediate(g.scores(), transposed(g.scores()), g.io());
  g.reshape(dS, dS_t);
  const int64_t dK = g.bound(Bind::dK, g.qkv(), g.io());
  g.matmul(dS_t, Q, dK);

  const int64_t K = g.intermediate(g.qkv(), packed(g.qkv()), CUDNN_DATA_FLOAT);
  g.reshape(K_t, K);
  const int64_t dQ_accum = g.bound(Bind::dQ_accum, g.qkv(), CUDNN_DATA_FLOAT);
  g.matmul(dS, K, dQ_accum);
  const int64_t dQ = g.bound(Bind::dQ, g.qkv(), g.io());
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dQ_accum, 0, dQ);
  return g.finish(handle, "backward");
}

}  // namespace flashbench::cuda
