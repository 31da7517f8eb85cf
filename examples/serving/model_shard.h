// ModelShard: the part of the example model (model_spec.h) one rank holds,
// and the local math on it:
//   - the layers of its pipeline stage;
//   - of each such layer's MLP, the ffn columns [t*F/T, (t+1)*F/T) of W1
//     and the same rows of W2 (tensor parallelism: each rank's partial
//     output is summed over the tensor group);
//   - of each such layer's experts, those its expert index e owns:
//     [e*X/E, (e+1)*X/E).
// Immutable after construction; thread-safe.
#ifndef RANKD_EXAMPLES_SERVING_MODEL_SHARD_H_
#define RANKD_EXAMPLES_SERVING_MODEL_SHARD_H_

#include <cstdint>
#include <vector>

#include "examples/serving/collectives.h"
#include "examples/serving/layout.h"
#include "examples/serving/model_spec.h"

namespace rankd::examples {

class ModelShard {
 public:
  ModelShard(const ModelSpec& spec, const ServingLayout& layout);

  const ModelSpec& spec() const { return spec_; }
  // Layers [first_layer(), first_layer() + num_layers()) are this stage's.
  uint32_t first_layer() const { return first_layer_; }
  uint32_t num_layers() const { return num_layers_; }
  uint32_t experts_per_member() const { return experts_per_member_; }
  // The expert-group member that owns `expert`.
  uint32_t OwnerOf(uint32_t expert) const {
    return expert / experts_per_member_;
  }

  // gelu(x . W1[:, slice]) . W2[slice, :] for each row of x: this rank's
  // partial MLP output, [x.rows, hidden]. `layer` is a model layer of this
  // stage.
  Matrix MlpPartial(uint32_t layer, const Matrix& x) const;

  // 0.5 * tanh(x . Wk) for one row: the residual update of expert `expert`
  // (owned by this rank) in `layer`. Writes `hidden` values to `out`.
  void ExpertDelta(uint32_t layer, uint32_t expert, const float* x,
                   float* out) const;

 private:
  struct Layer {
    std::vector<float> w1;                    // [hidden, ffn_slice]
    std::vector<float> w2;                    // [ffn_slice, hidden]
    std::vector<std::vector<float>> experts;  // each [hidden, hidden]
  };
  const Layer& LayerAt(uint32_t layer) const {
    return layers_[layer - first_layer_];
  }

  ModelSpec spec_;
  uint32_t first_layer_;
  uint32_t num_layers_;
  uint32_t ffn_slice_;
  uint32_t ffn_offset_;
  uint32_t experts_per_member_;
  uint32_t first_expert_;
  std::vector<Layer> layers_;
};

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_MODEL_SHARD_H_
