#pragma once
// Which parameters `--freeze` leaves untrained. A pattern is glob-style (`*` any run of characters,
// dots included; `?` one character) and names a parameter by its path (layer4.0.conv1.weight) or
// by any submodule path above it (layer4.0.conv1, layer4): `layer4` freezes everything under it.
// Patterns apply in order and a pattern that starts with `!` trains again what it names, so
// `*,!fc` freezes all but fc.
#include <string>
#include <string_view>
#include <vector>

namespace headroom::core {

// Whether `pattern` (no `!`) matches `text` whole.
bool glob_matches(std::string_view pattern, std::string_view text);

// Whether the patterns, in order, leave the parameter at `path` frozen.
bool frozen_by(const std::vector<std::string>& patterns, std::string_view path);

// Splits "a,b,!c" into its patterns; throws InputError naming `field` for an empty pattern.
std::vector<std::string> parse_freeze_patterns(std::string_view text, std::string_view field = "--freeze");

// Checks the patterns against the parameters' paths: each pattern must name at least one parameter
// (a typo would otherwise train what the user meant to freeze), and something must stay trained.
// `already_frozen`, one per path: frozen by the model itself (its requires_grad flags). Throws
// InputError "<field>: ..." naming the first pattern that matches nothing, or saying that nothing
// would be trained; `model` names the model in the message.
void check_freeze_patterns(const std::vector<std::string>& patterns, const std::vector<std::string>& paths,
                           const std::vector<bool>& already_frozen, std::string_view model,
                           std::string_view field = "--freeze");

}  // namespace headroom::core
