#pragma once
// A module captured in eager PyTorch (python/headroom/_eager.py) as a model the profiler measures:
// its layers as the capture found them, run whole by the module's own Python forward, which reports
// each layer's call to the profiler's observer (models::WholeForward).
#include <pybind11/pybind11.h>

#include "models/model.h"

namespace headroom::python {

// `capture`: a headroom._eager.EagerCapture. Call without the GIL (the profile runs without it);
// the model takes it whenever it reaches into Python.
models::Model build_eager_model(pybind11::object capture);

// The observer as the capture's forward calls it (before(i), after(i, output)), and the synthetic
// batches and loss targets the capture shares with the profiler.
void bind_eager_capture(pybind11::module_& m);

}  // namespace headroom::python
