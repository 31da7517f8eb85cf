// The single-process reference of the example model (see reference_model.h).
#include "examples/serving/reference_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace rankd::examples {

ReferenceModel::ReferenceModel(const ModelSpec& spec) : spec_(spec) {
  const uint32_t h = spec.hidden, f = spec.ffn;
  for (uint32_t l = 0; l < spec.layers; ++l) {
    Layer layer;
    layer.w1.resize(size_t{h} * f);
    layer.w2.resize(size_t{f} * h);
    for (uint32_t i = 0; i < h; ++i) {
      for (uint32_t j = 0; j < f; ++j) {
        layer.w1[i * f + j] = Weight(spec, WeightKind::kMlpIn, l, 0, i, j);
        layer.w2[j * h + i] = Weight(spec, WeightKind::kMlpOut, l, 0, j, i);
      }
    }
    for (uint32_t k = 0; k < spec.experts; ++k) {
      std::vector<float> w(size_t{h} * h);
      for (uint32_t i = 0; i < h; ++i) {
        for (uint32_t j = 0; j < h; ++j) {
          w[i * h + j] = Weight(spec, WeightKind::kExpert, l, k, i, j);
        }
      }
      layer.experts.push_back(std::move(w));
    }
    layers_.push_back(std::move(layer));
  }
}

Matrix ReferenceModel::Forward(const SlotBatch& batch) const {
  const uint32_t h = spec_.hidden, f = spec_.ffn;
  const std::vector<TokenRef> tokens = batch.TokenRefs();
  Matrix x = Matrix::Zeros(tokens.size(), h);
  std::vector<float> u(f), y(h);
  for (size_t r = 0; r < tokens.size(); ++r) {
    float* row = x.row(r);
    const std::vector<float> e =
        Embed(spec_, TokenId(spec_, tokens[r].request_id, tokens[r].position));
    std::copy(e.begin(), e.end(), row);
    for (uint32_t l = 0; l < spec_.layers; ++l) {
      const Layer& w = layers_[l];
      // MLP over the full ffn width.
      for (uint32_t j = 0; j < f; ++j) {
        float acc = 0;
        for (uint32_t i = 0; i < h; ++i) acc += row[i] * w.w1[i * f + j];
        u[j] = Gelu(acc);
      }
      std::fill(y.begin(), y.end(), 0.0f);
      for (uint32_t j = 0; j < f; ++j) {
        for (uint32_t i = 0; i < h; ++i) y[i] += u[j] * w.w2[j * h + i];
      }
      for (uint32_t i = 0; i < h; ++i) row[i] += y[i];
      // The token's expert.
      const std::vector<float>& we = w.experts[ExpertOf(
          spec_, tokens[r].request_id, tokens[r].position, l)];
      for (uint32_t j = 0; j < h; ++j) {
        float acc = 0;
        for (uint32_t i = 0; i < h; ++i) acc += row[i] * we[i * h + j];
        y[j] = 0.5f * std::tanh(acc);
      }
      for (uint32_t i = 0; i < h; ++i) row[i] += y[i];
    }
  }
  return x;
}

}  // namespace rankd::examples
