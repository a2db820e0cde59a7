#pragma once
// What `headroom plan` and `headroom simulate` print.
#include <string>

#include "core/plan.h"

namespace headroom::report {

std::string render_plan_summary(const core::Plan& plan);

}  // namespace headroom::report
