#pragma once
// Validating access to a parsed JSON document. Every getter knows the JSON path of the value it
// reads, so the first problem in a document is reported as one line such as
//   $.layers[3].samples[0].fwd_ns: expected a non-negative integer, got string
// Shared by the trace, plan and report readers.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace headroom::core {

class JsonNode {
 public:
  JsonNode(const nlohmann::json& value, std::string path) : value_(&value), path_(std::move(path)) {}

  const std::string& path() const { return path_; }
  const nlohmann::json& raw() const { return *value_; }

  // Object members; a missing member is an error naming the member's path.
  JsonNode at(std::string_view key) const;
  bool has(std::string_view key) const;
  // Array elements.
  std::vector<JsonNode> elements() const;

  std::string as_string() const;
  std::int64_t as_int() const;
  std::int64_t as_non_negative_int() const;
  // An integer in [min, max]; otherwise "<path>: expected an integer from <min> to <max>, got <v>".
  std::int64_t as_int_in(std::int64_t min, std::int64_t max) const;
  double as_double() const;
  bool as_bool() const;
  void expect_object() const;

  // Throws InputError "<path>: <message>".
  [[noreturn]] void fail(const std::string& message) const;

 private:
  const nlohmann::json* value_;
  std::string path_;
};

// Parses text as JSON; malformed or truncated text throws InputError naming `source`, line and column,
// and so does a number out of a double's range.
nlohmann::json parse_json(std::string_view text, std::string_view source);

// Checks the document's "schema" member equals `expected`.
void expect_schema(const JsonNode& root, std::string_view expected);

// A JSON type name for messages: "string", "integer", "object", ...
std::string json_type_name(const nlohmann::json& value);

}  // namespace headroom::core
