// One rank's part of one serving step (see forward_step.h).
#include "examples/serving/forward_step.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "examples/serving/model_spec.h"
#include "examples/serving/moe_dispatch.h"

namespace rankd::examples {
namespace {

Matrix Embeddings(const ModelSpec& spec, const SlotBatch& batch) {
  const std::vector<TokenRef> tokens = batch.TokenRefs();
  Matrix x = Matrix::Zeros(tokens.size(), spec.hidden);
  for (size_t r = 0; r < tokens.size(); ++r) {
    const std::vector<float> e =
        Embed(spec, TokenId(spec, tokens[r].request_id, tokens[r].position));
    std::copy(e.begin(), e.end(), x.row(r));
  }
  return x;
}

void AddInPlace(Matrix& x, const Matrix& y) {
  for (size_t i = 0; i < x.values.size(); ++i) x.values[i] += y.values[i];
}

}  // namespace

absl::StatusOr<Matrix> ForwardStep(Collectives& collectives,
                                   const ModelShard& shard,
                                   const ServingLayout& layout,
                                   const StepPlan& plan) {
  const ModelSpec& spec = shard.spec();
  const uint32_t h = spec.hidden;
  const SlotBatch& batch = plan.slots[layout.my_slot()];
  const size_t n = batch.tokens();
  const bool tensor_parallel = layout.topology.tensor > 1;
  const bool expert_parallel = layout.topology.expert > 1;

  // 1. Input.
  Matrix x = Matrix::Zeros(0, h);
  if (layout.first_stage()) {
    x = Embeddings(spec, batch);
  } else if (n > 0) {
    auto received = collectives.Receive(layout.pipeline_group,
                                        layout.coords.pipeline - 1, n, h);
    if (!received.ok()) return received.status();
    x = *std::move(received);
  }

  // 2. The stage's layers.
  for (uint32_t layer = shard.first_layer();
       layer < shard.first_layer() + shard.num_layers(); ++layer) {
    if (n > 0) {
      Matrix partial = shard.MlpPartial(layer, x);
      if (tensor_parallel) {
        if (absl::Status s =
                collectives.AllReduceSum(layout.tensor_group, partial);
            !s.ok()) {
          return s;
        }
      }
      AddInPlace(x, partial);
    }

    const DispatchPlan dispatch = PlanDispatch(shard, layout, plan, layer);
    Matrix send = Matrix::Zeros(n, h);
    for (size_t k = 0; k < dispatch.send_order.size(); ++k) {
      std::copy(x.row(dispatch.send_order[k]),
                x.row(dispatch.send_order[k]) + h, send.row(k));
    }
    Matrix received = send;
    if (expert_parallel) {
      auto r =
          collectives.AllToAllV(layout.expert_group, send, dispatch.send_counts,
                                dispatch.receive_counts);
      if (!r.ok()) return r.status();
      received = *std::move(r);
    }
    Matrix delta = Matrix::Zeros(received.rows, h);
    for (size_t i = 0; i < received.rows; ++i) {
      shard.ExpertDelta(layer, dispatch.received_experts[i], received.row(i),
                        delta.row(i));
    }
    Matrix back = delta;
    if (expert_parallel) {
      auto r =
          collectives.AllToAllV(layout.expert_group, delta,
                                dispatch.receive_counts, dispatch.send_counts);
      if (!r.ok()) return r.status();
      back = *std::move(r);
    }
    for (size_t k = 0; k < dispatch.send_order.size(); ++k) {
      float* row = x.row(dispatch.send_order[k]);
      const float* d = back.row(k);
      for (uint32_t i = 0; i < h; ++i) row[i] += d[i];
    }
  }

  // 3. Output to the next stage.
  if (!layout.last_stage() && n > 0) {
    if (absl::Status s = collectives.Send(layout.pipeline_group,
                                          layout.coords.pipeline + 1, x);
        !s.ok()) {
      return s;
    }
  }
  return x;
}

}  // namespace rankd::examples
