#pragma once
// A trace with more batch sizes measured into it (`headroom profile ... --add-to T`): a plan whose
// micro-batches fall between the profiled sizes predicts them from the samples around them, a bound
// where a kernel's workspace is not linear in the batch (docs/results.md, "Peaks between profiled
// sizes"); profiling those sizes into the trace makes the same plan's figures measured ones.
#include "core/trace.h"

namespace headroom::core {

// `base` with `added`'s batch sizes among its own, each sample where its size falls. Both must have
// measured the same model, on the same device and machine, with the same optimizer, precisions,
// threads and profiling passes; their batch sizes must not overlap. Throws InputError naming what
// differs. Where the two calibrations differ beyond their noise (the machine's speed moved between
// the runs), `added`'s times are rescaled to `base`'s machine first; memory is as measured.
Trace with_batch_sizes_added(const Trace& base, const Trace& added);
// The checks that need only the model (built, not yet profiled) and the sizes asked for: throw InputError.
void expect_same_model(const ModelInfo& base, const ModelInfo& added);
void expect_sizes_absent(const Trace& base, const std::vector<std::int64_t>& batch_sizes);

}  // namespace headroom::core
