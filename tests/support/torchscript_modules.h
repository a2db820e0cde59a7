#pragma once
// TorchScript modules scripted in C++ (torch::jit::Module::define), as a user's PyTorch code would
// give them, so the tests of a user's own module need no Python.
#include <torch/script.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "executor/plan_runner.h"
#include "models/torchscript_model.h"

namespace headroom::testing {

// What torch.jit.script gives every nn.Module and C++ modules lack.
inline torch::jit::Module scripted(const std::string& type) {
  torch::jit::Module m("__torch__." + type);
  m.register_attribute("training", c10::BoolType::get(), true);
  return m;
}

// A linear layer with ReLU, optionally dropout, as its own TorchScript class.
inline torch::jit::Module dense(const std::string& type, std::int64_t in, std::int64_t out, double dropout = 0) {
  torch::jit::Module m = scripted(type);
  m.register_parameter("weight", (torch::randn({out, in}) / std::sqrt(static_cast<double>(in))).requires_grad_(), false);
  m.register_parameter("bias", torch::zeros({out}, torch::requires_grad()), false);
  m.define("def forward(self, x):\n"
           "    y = torch.relu(torch.matmul(x, self.weight.t()) + self.bias)\n"
           "    return torch.dropout(y, " + std::to_string(dropout) + ", self.training)\n");
  return m;
}

inline torch::jit::Module head(std::int64_t in, std::int64_t classes) {
  torch::jit::Module m = scripted("Head");
  m.register_parameter("weight", (torch::randn({classes, in}) / std::sqrt(static_cast<double>(in))).requires_grad_(), false);
  m.define("def forward(self, x):\n    return torch.matmul(x, self.weight.t())\n");
  return m;
}

// Children registered in order and a forward given as source.
inline std::filesystem::path save_module(const std::string& file,
                                         const std::vector<std::pair<std::string, torch::jit::Module>>& children,
                                         const std::string& forward) {
  torch::jit::Module root = scripted("Chain");
  for (const auto& [name, child] : children) root.register_module(name, child);
  root.define(forward);
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("headroom-ts-" + std::to_string(::getpid()) + "-" + file);
  root.save(path.string());
  return path;
}

// A small residual network written as one would in PyTorch: a helper method, blocks of their own
// class with a skip connection, a flatten before the head.
inline torch::jit::Module residual_block(const std::string& type, std::int64_t width) {
  torch::jit::Module m = scripted(type);
  m.register_module("fc1", dense(type + "A", width, width));
  m.register_module("fc2", dense(type + "B", width, width));
  m.define("def forward(self, x):\n"
           "    y = self.fc2.forward(self.fc1.forward(x))\n"
           "    return torch.relu(y + x)\n");
  return m;
}

inline std::filesystem::path residual_network() {
  torch::manual_seed(5);
  torch::jit::Module stage = scripted("Stage");
  stage.register_module("0", residual_block("Res0", 16));
  stage.register_module("1", residual_block("Res1", 16));
  stage.define("def forward(self, x):\n"
               "    x = getattr(self, '0').forward(x)\n"
               "    return getattr(self, '1').forward(x)\n");
  torch::jit::Module head_module = scripted("ResHead");
  head_module.register_module("fc", head(16, 5));
  head_module.define("def forward(self, x):\n    return self.fc.forward(x)\n");
  return save_module("residual.pt", {{"stem", dense("Stem", 8, 16)}, {"stage", stage}, {"head", head_module}},
                     "def _forward_impl(self, x):\n"
                     "    x = self.stem.forward(x)\n"
                     "    x = self.stage.forward(x)\n"
                     "    return self.head.forward(torch.flatten(x, 1))\n"
                     "def forward(self, x):\n"
                     "    return self._forward_impl(x)\n");
}

inline std::map<std::string, std::string> features_input() { return {{"input", "8:float32"}}; }

// Micro-batched and checkpointed against one full batch, from the same weights and data.
inline double gradient_difference(const std::filesystem::path& path, const std::vector<std::int64_t>& micro,
                                  const std::vector<int>& checkpointed, bool dropout_on,
                                  const std::map<std::string, std::string>& config = features_input()) {
  models::Model model = models::load_torchscript_model(path.string(), config, 0);
  model.set_training(true);
  model.set_dropout(dropout_on);
  executor::Position position;
  executor::PlanRunner runner(model, checkpointed, position);
  const auto batches = executor::make_micro_batches(model, micro, 5, torch::kCPU);
  std::int64_t total = 0;
  for (const auto b : micro) total += b;
  torch::manual_seed(3);
  runner.accumulate(batches, total);
  const auto accumulated = executor::gradients_of(model.parameters());
  for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  if (dropout_on) {
    // With dropout the reference is the same micro-batches without checkpointing, same RNG.
    executor::PlanRunner plain(model, {}, position);
    torch::manual_seed(3);
    plain.accumulate(batches, total);
  } else {
    model.forward(executor::concatenate(batches)).backward();
  }
  return executor::max_relative_difference(accumulated, executor::gradients_of(model.parameters()));
}

}  // namespace headroom::testing
