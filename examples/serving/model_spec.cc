// Deterministic parameters of the example model (see model_spec.h).
#include "examples/serving/model_spec.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rankd::examples {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Mix(uint64_t seed, std::initializer_list<uint64_t> parts) {
  uint64_t h = SplitMix64(seed);
  for (uint64_t p : parts) h = SplitMix64(h ^ p);
  return h;
}

// Uniform in [-1, 1).
float Unit(uint64_t h) {
  return static_cast<float>(static_cast<double>(h >> 11) * 0x1.0p-52 - 1.0);
}

uint32_t RoundUp(uint32_t value, uint32_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

absl::Status CheckDivides(uint32_t value, uint32_t degree, const char* field,
                          const char* axis) {
  if (value == 0 || value % degree != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", field, "=", value, " must be a positive multiple of",
                     " the ", axis, "-parallel degree ", degree));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ModelSpec::ToString() const {
  return absl::StrCat("hidden ", hidden, ", ffn ", ffn, ", ", layers,
                      " layers, ", experts, " experts/layer");
}

absl::StatusOr<ModelSpec> ModelSpecFor(const ParallelTopology& topology,
                                       const ModelSpec& requested) {
  ModelSpec spec = requested;
  const ModelSpec defaults;
  if (spec.hidden == 0) spec.hidden = defaults.hidden;
  if (spec.vocab == 0) spec.vocab = defaults.vocab;
  if (requested.ffn == 0) spec.ffn = RoundUp(defaults.ffn, topology.tensor);
  if (requested.layers == 0) {
    spec.layers = RoundUp(defaults.layers, topology.pipeline);
  }
  if (requested.experts == 0) {
    spec.experts = RoundUp(defaults.experts, topology.expert);
  }
  if (absl::Status s = CheckDivides(spec.ffn, topology.tensor, "ffn", "tensor");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckDivides(spec.layers, topology.pipeline, "layers", "pipeline");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckDivides(spec.experts, topology.expert, "experts", "expert");
      !s.ok()) {
    return s;
  }
  return spec;
}

float Weight(const ModelSpec& spec, WeightKind kind, uint32_t layer,
             uint32_t expert, uint32_t i, uint32_t j) {
  const uint32_t fan_in = kind == WeightKind::kMlpOut ? spec.ffn : spec.hidden;
  const float scale = 1.0f / std::sqrt(static_cast<float>(fan_in));
  return scale * Unit(Mix(spec.seed,
                          {static_cast<uint64_t>(kind), layer, expert, i, j}));
}

uint32_t TokenId(const ModelSpec& spec, uint32_t request_id,
                 uint32_t position) {
  return static_cast<uint32_t>(Mix(spec.seed, {0x70c3, request_id, position}) %
                               spec.vocab);
}

std::vector<float> Embed(const ModelSpec& spec, uint32_t token) {
  std::vector<float> x(spec.hidden);
  for (uint32_t i = 0; i < spec.hidden; ++i) {
    x[i] = Unit(Mix(spec.seed, {0xe3b, token, i}));
  }
  return x;
}

uint32_t ExpertOf(const ModelSpec& spec, uint32_t request_id, uint32_t position,
                  uint32_t layer) {
  return static_cast<uint32_t>(
      Mix(spec.seed, {0x5e1ec7, request_id, position, layer}) % spec.experts);
}

float Gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608f;
  return 0.5f * x *
         (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

}  // namespace rankd::examples
