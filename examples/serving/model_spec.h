// ModelSpec: the toy model the serving example runs, and everything about it
// that is a pure function of (spec, seed): weights, token embeddings, token
// ids and hash routing to experts. The sharded model (model_shard.h) and the
// single-process reference (reference_model.h) both read their parameters
// from here, so they compute the same function by construction; only the
// order of floating-point additions differs.
//
// The model is `layers` residual layers over a `hidden`-wide activation:
//
//   x <- x + W2 . gelu(W1 . x)           (MLP, W1: hidden x ffn,
//                                          W2: ffn x hidden; tensor-parallel)
//   x <- x + 0.5 * tanh(Wk . x)          (mixture of experts: token -> expert
//                                          k by a hash of (request, position,
//                                          layer); Wk: hidden x hidden)
//
// Parameters are hash-derived (SplitMix64), so any rank can materialize any
// slice without generating the rest. Pure computation; thread-safe.
#ifndef RANKD_EXAMPLES_SERVING_MODEL_SPEC_H_
#define RANKD_EXAMPLES_SERVING_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/topology.h"

namespace rankd::examples {

struct ModelSpec {
  uint32_t hidden = 64;
  uint32_t ffn = 128;
  uint32_t layers = 2;
  // Experts per layer, spread evenly over the expert-parallel group.
  uint32_t experts = 4;
  uint32_t vocab = 32000;
  uint64_t seed = 2024;

  // "hidden 64, ffn 128, 2 layers, 4 experts/layer".
  std::string ToString() const;
};

// The spec for `topology`: each zero field of `requested` takes its default,
// rounded up so the layout divides it (ffn by tensor, layers by pipeline,
// experts by expert). InvalidArgument naming the field when an explicit
// value does not divide.
absl::StatusOr<ModelSpec> ModelSpecFor(const ParallelTopology& topology,
                                       const ModelSpec& requested);

// Where a weight lives.
enum class WeightKind : uint32_t { kMlpIn = 1, kMlpOut = 2, kExpert = 3 };

// Element (i, j) of a weight matrix, uniform in [-1/sqrt(fan_in),
// 1/sqrt(fan_in)]. For kMlpIn: i < hidden, j < ffn. kMlpOut: i < ffn, j <
// hidden. kExpert (`expert` selects the matrix): i, j < hidden. Row i is
// the input dimension.
float Weight(const ModelSpec& spec, WeightKind kind, uint32_t layer,
             uint32_t expert, uint32_t i, uint32_t j);

// The token id at `position` of request `request_id`.
uint32_t TokenId(const ModelSpec& spec, uint32_t request_id, uint32_t position);

// The embedding of `token`: `hidden` values in [-1, 1].
std::vector<float> Embed(const ModelSpec& spec, uint32_t token);

// The expert (in [0, experts)) that serves the token at `position` of
// `request_id` in `layer` (hash routing).
uint32_t ExpertOf(const ModelSpec& spec, uint32_t request_id, uint32_t position,
                  uint32_t layer);

// tanh-approximated GELU.
float Gelu(float x);

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_MODEL_SPEC_H_
