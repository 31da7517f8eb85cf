// One rank's shard of the example model (see model_shard.h).
#include "examples/serving/model_shard.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace rankd::examples {

ModelShard::ModelShard(const ModelSpec& spec, const ServingLayout& layout)
    : spec_(spec),
      first_layer_(layout.coords.pipeline * spec.layers /
                   layout.topology.pipeline),
      num_layers_(spec.layers / layout.topology.pipeline),
      ffn_slice_(spec.ffn / layout.topology.tensor),
      ffn_offset_(layout.coords.tensor * ffn_slice_),
      experts_per_member_(spec.experts / layout.topology.expert),
      first_expert_(layout.coords.expert * experts_per_member_) {
  const uint32_t h = spec.hidden;
  for (uint32_t l = first_layer_; l < first_layer_ + num_layers_; ++l) {
    Layer layer;
    layer.w1.resize(size_t{h} * ffn_slice_);
    layer.w2.resize(size_t{ffn_slice_} * h);
    for (uint32_t i = 0; i < h; ++i) {
      for (uint32_t j = 0; j < ffn_slice_; ++j) {
        layer.w1[i * ffn_slice_ + j] =
            Weight(spec, WeightKind::kMlpIn, l, 0, i, ffn_offset_ + j);
        layer.w2[j * h + i] =
            Weight(spec, WeightKind::kMlpOut, l, 0, ffn_offset_ + j, i);
      }
    }
    for (uint32_t k = 0; k < experts_per_member_; ++k) {
      std::vector<float> w(size_t{h} * h);
      for (uint32_t i = 0; i < h; ++i) {
        for (uint32_t j = 0; j < h; ++j) {
          w[i * h + j] =
              Weight(spec, WeightKind::kExpert, l, first_expert_ + k, i, j);
        }
      }
      layer.experts.push_back(std::move(w));
    }
    layers_.push_back(std::move(layer));
  }
}

Matrix ModelShard::MlpPartial(uint32_t layer, const Matrix& x) const {
  const Layer& w = LayerAt(layer);
  const uint32_t h = spec_.hidden;
  Matrix out = Matrix::Zeros(x.rows, h);
  std::vector<float> u(ffn_slice_);
  for (size_t r = 0; r < x.rows; ++r) {
    const float* in = x.row(r);
    for (uint32_t j = 0; j < ffn_slice_; ++j) {
      float acc = 0;
      for (uint32_t i = 0; i < h; ++i) acc += in[i] * w.w1[i * ffn_slice_ + j];
      u[j] = Gelu(acc);
    }
    float* o = out.row(r);
    for (uint32_t j = 0; j < ffn_slice_; ++j) {
      for (uint32_t i = 0; i < h; ++i) o[i] += u[j] * w.w2[j * h + i];
    }
  }
  return out;
}

void ModelShard::ExpertDelta(uint32_t layer, uint32_t expert, const float* x,
                             float* out) const {
  const std::vector<float>& w = LayerAt(layer).experts[expert - first_expert_];
  const uint32_t h = spec_.hidden;
  for (uint32_t j = 0; j < h; ++j) {
    float acc = 0;
    for (uint32_t i = 0; i < h; ++i) acc += x[i] * w[i * h + j];
    out[j] = 0.5f * std::tanh(acc);
  }
}

}  // namespace rankd::examples
