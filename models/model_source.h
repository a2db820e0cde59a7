#pragma once
// The one seam between a model and what a trace records of it. The profiler records a model's
// source in the trace (model_source); the executor and the CLI build models only from a source
// (build_model). A new kind of model therefore touches this file and nothing that calls it.
//
// A source is a zoo model (its name and config) or a user's TorchScript file (its path and sha256,
// and the input, target, loss and layers it was profiled with as config): build_model loads the
// file after checking that its hash is the recorded one.
#include <cstdint>

#include "core/trace.h"
#include "models/model.h"

namespace headroom::models {

using ModelSource = core::ModelInfo;

// The model `source` names, with parameters initialised deterministically from `seed`. Throws
// InputError naming the model, or the config key it gets wrong.
Model build_model(const ModelSource& source, std::uint64_t seed);

// build_model of the trace's source, checked to have the trace's layers by name and count (a zoo
// that changed since the trace was recorded is refused with InputError naming the first difference).
Model build_traced_model(const core::Trace& trace, std::uint64_t seed);

// What a trace records of where `model` came from: build_model of it rebuilds the same layers.
ModelSource model_source(const Model& model);

}  // namespace headroom::models
