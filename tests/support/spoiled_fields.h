#pragma once
// Every field of a JSON document spoiled in turn (missing, of the wrong type, out of range), for
// the tests that a reader names each bad field or documents why it takes it.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/json_reader.h"

namespace headroom::testing {

using json = nlohmann::json;

// Every leaf of a document, as a JSON pointer.
inline void leaves(const json& node, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  if (node.is_object()) {
    for (auto it = node.begin(); it != node.end(); ++it) leaves(it.value(), at / it.key(), out);
  } else if (node.is_array() && !node.empty()) {
    // Arrays of samples repeat one shape: their first and last elements stand for the rest.
    leaves(node.front(), at / 0, out);
    if (node.size() > 1) leaves(node.back(), at / (node.size() - 1), out);
  } else {
    out.push_back(at);
  }
}

// "$.layers[3].samples[0].fwd_ns", as the readers name fields.
inline std::string json_path(json::json_pointer pointer) {
  std::vector<std::string> tokens;
  for (; !pointer.empty(); pointer.pop_back()) tokens.push_back(pointer.back());
  std::string path = "$";
  for (auto token = tokens.rbegin(); token != tokens.rend(); ++token) {
    const bool index = !token->empty() && token->find_first_not_of("0123456789") == std::string::npos;
    path += index ? "[" + *token + "]" : "." + *token;
  }
  return path;
}

struct Spoiling {
  std::string what;
  std::function<bool(json& document, const json::json_pointer& at)> apply;  // false: does not apply
};

// Missing, of the wrong type, and out of range (negative, past any size the program keeps, not a number).
inline std::vector<Spoiling> spoilings() {
  return {
      {"missing",
       [](json& d, const json::json_pointer& at) {
         if (at.empty() || !d.at(at.parent_pointer()).is_object()) return false;
         d.at(at.parent_pointer()).erase(at.back());
         return true;
       }},
      {"wrong type",
       [](json& d, const json::json_pointer& at) {
         json& v = d.at(at);
         v = v.is_string() ? json(12345) : json("x");
         return true;
       }},
      {"negative",
       [](json& d, const json::json_pointer& at) {
         json& v = d.at(at);
         if (!v.is_number()) return false;
         v = v.is_number_float() ? json(-1.5) : json(-2);
         return true;
       }},
      {"huge",
       [](json& d, const json::json_pointer& at) {
         json& v = d.at(at);
         if (!v.is_number()) return false;
         v = v.is_number_float() ? json(1e300) : json(std::int64_t{1} << 62);
         return true;
       }},
  };
}

// Fields a reader may take without them, and values a spoiling makes that are still valid, by
// path pattern (array indices as *) and spoiling: each says why it is not an error.
inline bool accepted_on_purpose(const std::string& path, const std::string& what) {
  static const std::set<std::pair<std::string, std::string>> allowed = {
      // -2 for a block is invalid, but -1 (no block) is the documented "none"; negative net
      // changes of allocated bytes are real (a layer that frees more than it allocates).
      {"$.layers[*].samples[*].fwd_retained_bytes", "negative"},
      {"$.layers[*].samples[*].bwd_retained_bytes", "negative"},
      // -2 is the target (kTargetInput), an input a loss layer reads.
      {"$.layers[*].inputs[*]", "negative"},
      // Any 64-bit seed is a seed.
      {"$.profile.seed", "huge"},
      // A plan from before Tempo names no variant: every layer standard.
      {"$.layers[*].variant", "missing"},
      // A trace from before they were recorded: read as 0, and its plans say so (extras_recorded).
      {"$.checkpoint_state_bytes", "missing"},
      {"$.model_extra_bytes", "missing"},
      // An L2L plan without it offloads the whole model (from a chosen block on is the option).
      {"$.l2l.from_block", "missing"},
      {"$.contrastive_loss.samples[*].fwd_retained_bytes", "negative"},
      {"$.contrastive_loss.samples[*].bwd_retained_bytes", "negative"},
      // A link measured before its latency was: read as 0 (core/trace.h), copies cost their bytes.
      {"$.device.host_to_device_latency_ns", "missing"},
      {"$.device.device_to_host_latency_ns", "missing"},
      // A trace from before it was recorded: timed for two seconds, if at all (core/trace.h).
      {"$.profile.timing_seconds", "missing"},
  };
  // The zoo reads a model's settings when it builds the model (execute), and names the key there.
  if (path.rfind("$.model.config.", 0) == 0) return true;
  std::string pattern;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '[') {
      const std::size_t close = path.find(']', i);
      pattern += "[*]";
      i = close;
    } else {
      pattern += path[i];
    }
  }
  return allowed.contains({pattern, what});
}

struct Sweep {
  int spoiled = 0;
  std::vector<std::string> accepted;  // spoilings that were read without an error
};

// Reads each spoiled document with `read`; an InputError must name the spoiled field's JSON path
// (or the object that lost it).
inline Sweep sweep(const json& good, const std::function<void(const json&)>& read, const std::string& under = "") {
  Sweep out;
  std::vector<json::json_pointer> paths;
  leaves(under.empty() ? good : good.at(json::json_pointer(under)), json::json_pointer(under), paths);
  for (const auto& at : paths) {
    for (const auto& spoiling : spoilings()) {
      json document = good;
      if (!spoiling.apply(document, at)) continue;
      ++out.spoiled;
      const std::string path = json_path(at);
      try {
        read(document);
        if (!accepted_on_purpose(path, spoiling.what)) out.accepted.push_back(path + " " + spoiling.what);
      } catch (const core::InputError& e) {
        const std::string message = e.what();
        const std::string parent = json_path(at.parent_pointer());
        EXPECT_TRUE(message.find(path) != std::string::npos || message.find(parent) != std::string::npos)
            << path << " " << spoiling.what << ": " << message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      } catch (const std::exception& e) {
        ADD_FAILURE() << path << " " << spoiling.what << ": not an input error: " << e.what();
      }
    }
  }
  return out;
}

}  // namespace headroom::testing
