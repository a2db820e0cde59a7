#pragma once
// Small sizes of every zoo model, for tests that build them.
#include <map>
#include <string>

namespace headroom::testing {

// Small enough that each test runs in well under a second on two cores.
inline const std::map<std::string, std::map<std::string, std::string>> kSmall = {
    {"mlp", {{"input", "16"}, {"hidden", "32"}, {"depth", "2"}}},
    {"cnn", {{"image", "12"}, {"width", "4"}, {"stages", "2"}}},
    {"bert", {{"preset", "tiny"}, {"hidden", "32"}, {"heads", "2"}, {"seq", "8"}, {"vocab", "50"}}},
    {"gpt", {{"preset", "tiny"}, {"hidden", "32"}, {"heads", "2"}, {"seq", "8"}, {"vocab", "50"}}},
    {"clip", {{"image", "8"}, {"width", "4"}, {"hidden", "16"}, {"concepts", "16"}}},
};

}  // namespace headroom::testing
