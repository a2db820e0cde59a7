// Bad input, as a user or a corrupted file brings it: every field of a trace and a plan spoiled in
// turn (missing, wrong type, out of range), and the rows of the bad-input table run through the
// `headroom` binary (exit 2, one line naming the problem, no output written or an old one kept).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <set>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/json_reader.h"
#include "core/plan.h"
#include "core/sha256.h"
#include "core/trace.h"
#include "planner/plan_schedule.h"
#include "planner/plan_search.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTrace = std::string(HEADROOM_TRACES_DIR) + "/cpu-mlp.json";

// Every leaf of a document, as a JSON pointer.
void leaves(const json& node, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
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
std::string json_path(json::json_pointer pointer) {
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
std::vector<Spoiling> spoilings() {
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
bool accepted_on_purpose(const std::string& path, const std::string& what) {
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
Sweep sweep(const json& good, const std::function<void(const json&)>& read) {
  Sweep out;
  std::vector<json::json_pointer> paths;
  leaves(good, json::json_pointer(), paths);
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

TEST(BadTrace, EveryFieldSpoiledIsNamedOrDocumented) {
  const json good = core::parse_json(core::read_file(kTrace), kTrace);
  const Sweep s = sweep(good, [](const json& d) { core::trace_from_json(d, "t.json"); });
  EXPECT_GT(s.spoiled, 100);
  for (const auto& a : s.accepted) ADD_FAILURE() << "accepted: " << a;
  std::printf("trace: %d spoiled documents, %zu accepted\n", s.spoiled, s.accepted.size());
}

core::Plan mlp_plan() {
  const core::Trace trace = core::read_trace_file(kTrace);
  planner::PlanRequest request;
  request.global_batch = 64;
  request.budget_bytes = 1LL << 40;
  request.trace_path = kTrace;
  request.trace_sha256 = core::sha256_hex(core::read_file(kTrace));
  request.strategies = planner::all_strategies();
  return *planner::plan_step(trace, request).plan;
}

TEST(BadPlan, EveryFieldSpoiledIsNamedOrDocumented) {
  const core::Trace trace = core::read_trace_file(kTrace);
  const json good = core::to_json(mlp_plan());
  const Sweep s = sweep(good, [&](const json& d) {
    const core::Plan plan = core::plan_from_json(d, "p.json");
    planner::check_choice(plan, trace, "p.json");
  });
  EXPECT_GT(s.spoiled, 50);
  for (const auto& a : s.accepted) ADD_FAILURE() << "accepted: " << a;
  std::printf("plan: %d spoiled documents, %zu accepted\n", s.spoiled, s.accepted.size());
}

}  // namespace
}  // namespace headroom
