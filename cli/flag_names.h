#pragma once
// Libraries name the field an error is about, in their own terms ("warmup_steps: expected zero or
// more steps"); the user typed a flag. The CLI translates when it reports, so the line on stderr
// names what the user can change (docs/design.md, "Exit codes").
#include <string>

namespace headroom::cli {

// `message` with a leading field ("field: ..." or "field value: ...") replaced by the flag that
// sets it ("--warmup: ..."); any other message unchanged.
std::string name_flag(const std::string& message);

}  // namespace headroom::cli
