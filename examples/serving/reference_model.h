// ReferenceModel: the whole example model (model_spec.h) in one process,
// unsharded, computed the plain way: every layer, the full MLP, every
// expert. Rank 0 runs it on every slot's batch each step and compares the
// distributed result with it (self_check.h). Immutable after construction.
#ifndef RANKD_EXAMPLES_SERVING_REFERENCE_MODEL_H_
#define RANKD_EXAMPLES_SERVING_REFERENCE_MODEL_H_

#include <vector>

#include "examples/serving/collectives.h"
#include "examples/serving/model_spec.h"
#include "examples/serving/request_stream.h"

namespace rankd::examples {

class ReferenceModel {
 public:
  explicit ReferenceModel(const ModelSpec& spec);

  // The final activations of every token of `batch`, in the batch's token
  // order: [batch.tokens(), hidden].
  Matrix Forward(const SlotBatch& batch) const;

 private:
  struct Layer {
    std::vector<float> w1;                    // [hidden, ffn]
    std::vector<float> w2;                    // [ffn, hidden]
    std::vector<std::vector<float>> experts;  // each [hidden, hidden]
  };
  ModelSpec spec_;
  std::vector<Layer> layers_;
};

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_REFERENCE_MODEL_H_
