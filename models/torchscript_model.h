#pragma once
// A user's own model: a TorchScript module (torch.jit.save of torch.jit.script(model)) as it is
// written. Its forward is cut into layers at the calls of its submodules (models/script_graph.h),
// with the functional code between them; the spans between points where one tensor carries
// everything forward are blocks that can be checkpointed. The loss follows unless the module
// computes it. Batches are synthetic, of the shapes the user names.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/model.h"

namespace headroom::models {

// One sample's tensor, as typed: "3x224x224:float32", "128:int64:0-8192" (integers drawn from
// [0, 8192)), "scalar:int64:0-10" (one integer per sample; an empty shape means the same). The
// batch dimension is not part of it.
struct TensorSpec {
  std::vector<std::int64_t> shape;
  std::string dtype;  // float32, float64, int64, int32
  std::int64_t low = 0, high = 0;

  bool is_integer() const { return dtype == "int64" || dtype == "int32"; }
  std::int64_t elements() const;
  std::string text() const;
};

inline constexpr std::size_t kMaxSpecDims = 8;
// One sample's elements: a synthetic batch must stay a size the machine can make.
inline constexpr std::int64_t kMaxSampleElements = std::int64_t{1} << 26;
// A model file is read whole (hashed, then loaded from the same bytes).
inline constexpr std::int64_t kMaxModelFileBytes = std::int64_t{4} << 30;

// Throws InputError naming `field` (the flag or config key) and the form expected.
TensorSpec parse_tensor_spec(const std::string& text, const std::string& field);

// The config keys a TorchScript model records (and is rebuilt from):
//   input   the inputs' TensorSpecs, one per input forward takes, in its order, comma-separated
//           (required; --input repeated)
//   target  the target's TensorSpec; when absent it is found from the module's output and the loss
//   loss    cross-entropy, mse, or model (the module's output is the loss, a mean over the batch)
//   class_dim  with cross-entropy: 1, the classes along dimension 1 as PyTorch's cross_entropy takes
//           them ([N, C] or [N, C, H, W] against [N] or [N, H, W]); last, along the last (a language
//           model's [N, T, V] against [N, T]). Absent: last, as traces from before it was recorded meant.
//   layers  the submodules that are layers, by dotted path (layer2.1), comma-separated
//   depth   instead of layers: the submodules this deep that forward calls (1: its children); when
//           neither is given, a depth with enough layers to plan (models/script_graph.h)
//   output_index  where forward returns a tuple: the element the loss reads
inline constexpr const char* kTorchScriptKeys[] = {"input", "target", "loss", "class_dim", "layers", "depth", "output_index"};

// The target a loss of headroom's reads against `output` (batch first): for cross-entropy
// (`class_dim` "1" or "last") one class index per position, for mse the output's shape in float32.
// Throws InputError where cross-entropy finds no class dimension.
TensorSpec target_for_output(const std::string& loss, const std::string& class_dim, const torch::Tensor& output);

// Batches drawn from the specs, deterministic in (batch size, seed): each input from a stream of
// its own, integers within their range, floats standard normal; the target (none: an empty one, for
// a model that computes its loss) from another stream.
BatchGenerator synthetic_batches(const std::vector<TensorSpec>& inputs, const std::optional<TensorSpec>& target);

// Loads the module at `path` and cuts it into layers, checked on a probe batch against the module's
// own forward; the input and target must fit. `expected_sha256`, when given, must be the file's hash (a trace recorded it).
// The returned model's config holds every key resolved (target and layers filled in), so
// model_source() rebuilds it exactly. Throws InputError with one line naming the problem.
Model load_torchscript_model(const std::string& path, const std::map<std::string, std::string>& config,
                             std::uint64_t seed, const std::string& expected_sha256 = "");

}  // namespace headroom::models
