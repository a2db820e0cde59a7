#include "core/freeze_patterns.h"

#include <algorithm>

#include "core/errors.h"

namespace headroom::core {

namespace {

// Whether the pattern names the path or a submodule above it (a prefix that ends before a dot).
bool names_path(std::string_view pattern, std::string_view path) {
  if (glob_matches(pattern, path)) return true;
  for (std::size_t dot = path.find('.'); dot != std::string_view::npos; dot = path.find('.', dot + 1)) {
    if (glob_matches(pattern, path.substr(0, dot))) return true;
  }
  return false;
}

std::string_view without_bang(std::string_view pattern) { return pattern.substr(pattern.starts_with('!') ? 1 : 0); }

std::string joined(const std::vector<std::string>& patterns) {
  std::string out;
  for (const auto& pattern : patterns) out += (out.empty() ? "" : ",") + pattern;
  return out;
}

}  // namespace

bool glob_matches(std::string_view pattern, std::string_view text) {
  // Iterative with one backtrack point: the last `*` seen and where its run ends in the text.
  std::size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool frozen_by(const std::vector<std::string>& patterns, std::string_view path) {
  bool frozen = false;
  for (const auto& pattern : patterns) {
    if (names_path(without_bang(pattern), path)) frozen = !pattern.starts_with('!');
  }
  return frozen;
}

std::vector<std::string> parse_freeze_patterns(std::string_view text, std::string_view field) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    if (without_bang(item).empty()) {
      throw InputError(std::string(field) + ": expected comma-separated patterns such as layer4,fc or *,!fc, got '" +
                       std::string(text) + "'");
    }
    out.emplace_back(item);
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

void check_freeze_patterns(const std::vector<std::string>& patterns, const std::vector<std::string>& paths,
                           const std::vector<bool>& already_frozen, std::string_view model, std::string_view field) {
  for (const auto& pattern : patterns) {
    const bool named = std::any_of(paths.begin(), paths.end(), [&](const std::string& path) {
      return names_path(without_bang(pattern), path);
    });
    if (!named) {
      std::string example = paths.empty() ? std::string("none") : paths.front();
      throw InputError(std::string(field) + ": '" + pattern + "' names no parameter of " + std::string(model) +
                       " (parameters are named by path, e.g. " + example + ")");
    }
  }
  bool trained = false;
  for (std::size_t i = 0; i < paths.size(); ++i) trained |= !already_frozen[i] && !frozen_by(patterns, paths[i]);
  if (!trained && !paths.empty()) {
    if (patterns.empty()) {
      throw InputError(std::string(model) + ": every parameter is frozen (requires_grad is False): nothing to train");
    }
    throw InputError(std::string(field) + ": '" + joined(patterns) + "' leaves no parameter of " + std::string(model) +
                     " to train");
  }
}

}  // namespace headroom::core
