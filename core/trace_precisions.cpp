#include "core/trace_precisions.h"

#include <string>

#include "core/errors.h"

namespace headroom::core {

Trace with_precision_first(const Trace& trace, Precision precision, std::string_view what) {
  if (trace.precision == precision) return trace;
  if (trace.in_precision(precision) == nullptr) {
    throw InputError(std::string(what) + " measured the step in " + trace.precision_list() + ", not " +
                     std::string(precision_name(precision)));
  }
  Trace own = trace;
  own.other_precisions.clear();
  Trace first;
  std::vector<Trace> rest{std::move(own)};
  for (const auto& other : trace.other_precisions) {
    if (other.precision == precision) {
      first = other;
    } else {
      rest.push_back(other);
    }
  }
  first.other_precisions = std::move(rest);
  return first;
}

}  // namespace headroom::core
